"""`nexus usage` and `nexus budgets ...` on a real nats-server: budgets land on NEXUS_CATALOG
(a bad one is one line "FILE: field: message", exit 2, nothing published), ls/show/usage read
a stand-in for the spend service's queries (spend_responder.py), bad flags are one line, and
nothing answering is exit 4."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from nexus_events.contract import subjects
from nexus_events.contract.codec import Decoded
from nexus_events.contract.streams import CATALOG
from nexus_events.contract.subjects import CatalogKind
from nexus_events.events.budgets import BudgetApplied, BudgetDefinition, BudgetDeleted
from nexus_events.events.spend import (
    BudgetsList,
    BudgetView,
    ScopeStanding,
    StandingState,
    UsageGroup,
    UsageLine,
    UsageQuery,
    UsageReport,
)
from nexus_events.transport.bus import Bus
from tests.support.cli import nexus

from nexus_cli.client import whoami

from .spend_responder import SpendResponder, spend_service
from .test_flow_runs_cli import one_error_line

ROOT = Path(__file__).resolve().parents[3]
EXAMPLES = ROOT / "examples" / "budgets"


async def catalog(bus: Bus) -> list[Decoded]:
    subject = subjects.catalog_events_filter(CatalogKind.BUDGET)
    return [d async for d in bus.replay(CATALOG, filter_subject=subject)]


def line(key: str | None, runs: int, cost: float) -> UsageLine:
    return UsageLine(
        key=key,
        runs=runs,
        turns=runs * 3,
        tokens_in=runs * 1200,
        tokens_out=runs * 300,
        cost_usd=cost,
        wall_seconds=runs * 40.0,
    )


REPORT = UsageReport(
    by=UsageGroup.TEAM,
    rows=[line("alpha", 4, 31.2), line(None, 1, 0.0125)],
    total=line(None, 5, 31.2125),
)


async def test_usage_prints_each_group_and_the_total_and_sends_the_filters(
    bus: Bus, nats_url: str, tmp_path: Path
) -> None:
    async with spend_service(bus, SpendResponder(usage=REPORT)) as spend:
        result = await nexus(
            nats_url, tmp_path, "usage", "--by", "team", "--since", "2026-11-01",
            "--team", "alpha", "--agent", "implementer", "--limit", "20",
        )  # fmt: skip
        assert result.exit_code == 0, result.output
        lines = result.stdout.strip().splitlines()
        assert lines[0].split() == [
            "TEAM", "RUNS", "CALLS", "TOKENS", "IN", "TOKENS", "OUT", "COST", "WALL",
        ]  # fmt: skip
        assert lines[1].split() == ["alpha", "4", "12", "4,800", "1,200", "$31.20", "2m40s"]
        assert lines[2].split() == ["(none)", "1", "3", "1,200", "300", "$0.0125", "40s"]
        assert lines[3].split() == ["TOTAL", "5", "15", "6,000", "1,500", "$31.21", "3m20s"]
        query = spend.queries[-1]
        assert isinstance(query, UsageQuery)
        assert (query.by, query.team, query.agent_id, query.limit) == (
            UsageGroup.TEAM,
            "alpha",
            "implementer",
            20,
        )
        assert query.since is not None
        assert query.since.isoformat() == "2026-11-01T00:00:00+00:00"

        as_json = await nexus(nats_url, tmp_path, "usage", "--by", "team", "--json")
        assert as_json.exit_code == 0, as_json.output
        assert UsageReport.model_validate(json.loads(as_json.stdout)) == REPORT


@pytest.mark.parametrize(
    ("args", "text"),
    [
        (("--by", "colour"), "invalid --by 'colour'"),
        (("--since", "yesterday"), "invalid --since 'yesterday'"),
        (("--team", "a b"), "invalid --team 'a b'"),
    ],
)
async def test_usage_bad_flags_are_one_line_and_exit_2_before_asking(
    bus: Bus, nats_url: str, tmp_path: Path, args: tuple[str, ...], text: str
) -> None:
    async with spend_service(bus, SpendResponder(usage=REPORT)) as spend:
        result = await nexus(nats_url, tmp_path, "usage", *args)
        assert result.exit_code == 2, result.output
        one_error_line(result.stderr, text)
        assert spend.queries == []


async def test_usage_with_no_spend_service_is_exit_4(nats_url: str, tmp_path: Path) -> None:
    result = await nexus(nats_url, tmp_path, "usage")
    assert result.exit_code == 4, result.output
    one_error_line(result.stderr, f"nothing answers {subjects.SPEND_USAGE}")


async def test_apply_publishes_each_budget_and_history_and_delete_read_the_catalog(
    bus: Bus, nats_url: str, tmp_path: Path
) -> None:
    dry = await nexus(nats_url, tmp_path, "budgets", "apply", "--dry-run", str(EXAMPLES))
    assert dry.exit_code == 0, dry.output
    assert "budget/alpha-monthly valid" in dry.stdout
    assert await catalog(bus) == []

    applied = await nexus(nats_url, tmp_path, "budgets", "apply", "-f", str(EXAMPLES), "-o", "json")
    assert applied.exit_code == 0, applied.output
    assert [a["id"] for a in json.loads(applied.stdout)["applied"]] == ["alpha-monthly", "per-task"]
    stored = await catalog(bus)
    assert [d.address.ids["id"] for d in stored] == ["alpha-monthly", "per-task"]
    first = stored[0].event
    assert isinstance(first, BudgetApplied)
    assert (first.budget.scope.label(), first.budget.limits.cost_usd, first.applied_by) == (
        "team:alpha",
        50.0,
        whoami(),
    )

    # A changed budget is revision 2; history lists both revisions and then the delete.
    changed = tmp_path / "alpha.yaml"
    changed.write_text(
        (EXAMPLES / "alpha-monthly.yaml").read_text().replace("cost_usd: 50", "cost_usd: 80")
    )
    again = await nexus(nats_url, tmp_path, "budgets", "apply", str(changed))
    assert again.exit_code == 0, again.output
    assert again.stdout.strip() == f"budget/alpha-monthly applied ({changed})"
    deleted = await nexus(nats_url, tmp_path, "budgets", "delete", "alpha-monthly")
    assert deleted.exit_code == 0, deleted.output
    assert isinstance((await catalog(bus))[-1].event, BudgetDeleted)

    history = await nexus(nats_url, tmp_path, "budgets", "history", "alpha-monthly", "-o", "json")
    entries = json.loads(history.stdout)["history"]
    assert [(e["event"], e["revision"]) for e in entries] == [
        ("applied", 1),
        ("applied", 2),
        ("deleted", None),
    ]
    assert entries[1]["body"]["budget"]["limits"]["cost_usd"] == 80
    table = await nexus(nats_url, tmp_path, "budgets", "history", "alpha-monthly")
    assert "team:alpha month $80.00 ask" in table.stdout

    again_deleted = await nexus(nats_url, tmp_path, "budgets", "delete", "alpha-monthly")
    assert again_deleted.exit_code == 3
    one_error_line(again_deleted.stderr, "no budget 'alpha-monthly'")
    unknown = await nexus(nats_url, tmp_path, "budgets", "history", "nope")
    assert unknown.exit_code == 3


GOOD = """\
id: b1
scope: team:alpha
period: month
limits:
  cost_usd: 50
"""


@pytest.mark.parametrize(
    ("old", "new", "problem"),
    [
        ("team:alpha", "squad:alpha", "scope: unknown scope 'squad'"),
        ("cost_usd: 50", "cost_usd: -1", "limits.cost_usd: Input should be greater than or"),
        ("limits:\n  cost_usd: 50", "limits: {}", "limits: limits name none of cost_usd"),
        ("period: month", "period: fortnight", "period: period 'fortnight' does not parse"),
        ("cost_usd: 50\n", "cost_usd: 50\non_exceed: ask\n", "(document): on_exceed ask needs"),
    ],
)
async def test_a_refused_budget_is_one_line_exit_2_and_nothing_published(
    bus: Bus, nats_url: str, tmp_path: Path, old: str, new: str, problem: str
) -> None:
    good = tmp_path / "good.yaml"
    good.write_text(GOOD)
    bad = tmp_path / "bad.yaml"
    bad.write_text(GOOD.replace("b1", "b2").replace(old, new))
    result = await nexus(nats_url, tmp_path, "budgets", "apply", "-f", str(good), "-f", str(bad))
    assert result.exit_code == 2, result.output
    assert result.stderr.strip().splitlines() == [result.stderr.strip()]
    assert result.stderr.startswith(f"error: {bad}: {problem}"), result.stderr
    assert await catalog(bus) == []


def standing(instance: str, spent: float, reserved: float, **fields: object) -> ScopeStanding:
    return ScopeStanding.model_validate(
        {
            "budget_id": "alpha-monthly",
            "instance": instance,
            "period": "month",
            "bucket": "2026-11",
            "on_exceed": "ask",
            "state": StandingState.OK,
            "spent_cost_usd": spent,
            "reserved_cost_usd": reserved,
            "limit_cost_usd": 50.0,
            "runs": 4,
            **fields,
        }
    )


def views() -> list[BudgetView]:
    alpha, task = (
        BudgetDefinition.model_validate(yaml.safe_load((EXAMPLES / name).read_text()))
        for name in ("alpha-monthly.yaml", "per-task.yaml")
    )
    asking = standing(
        "team:alpha", 50.0, 0.0, state=StandingState.ASKING, ask_id="budget-ask-0123456789"
    )
    return [
        BudgetView(revision=2, budget=alpha, standings=[asking]),
        BudgetView(revision=1, budget=task, standings=[]),
    ]


async def test_ls_and_show_print_the_standing_from_the_spend_service(
    bus: Bus, nats_url: str, tmp_path: Path
) -> None:
    async with spend_service(bus, SpendResponder(budgets=views())) as spend:
        ls = await nexus(nats_url, tmp_path, "budgets", "ls")
        assert ls.exit_code == 0, ls.output
        rows = {r.split()[0]: r for r in ls.stdout.strip().splitlines()[1:]}
        assert rows["alpha-monthly"].split() == [
            "alpha-monthly", "team:alpha", "month", "$50.00", "ask",
            "$50.00", "/", "$0.0000", "/", "$50.00", "asking",
        ]  # fmt: skip
        assert rows["per-task"].split() == ["per-task", "task", "total", "$5.00", "stop"]

        only = await nexus(nats_url, tmp_path, "budgets", "ls", "--team", "alpha", "-o", "json")
        assert [b["budget"]["id"] for b in json.loads(only.stdout)["budgets"]] == ["alpha-monthly"]
        assert spend.queries[-1] == BudgetsList(team="alpha")

        show = await nexus(nats_url, tmp_path, "budgets", "show", "alpha-monthly")
        assert show.exit_code == 0, show.output
        out = show.stdout
        assert "budget alpha-monthly  revision 2" in out
        assert "approvers team:alpha" in out
        row = next(x for x in out.splitlines() if x.startswith("team:alpha"))
        assert row.split() == [
            "team:alpha", "2026-11", "$50.00", "$0.0000", "$0.0000", "4", "asking",
            "budget-ask-0123456789",
        ]  # fmt: skip

        missing = await nexus(nats_url, tmp_path, "budgets", "show", "nope")
        assert missing.exit_code == 3
        one_error_line(missing.stderr, "no budget 'nope'")
