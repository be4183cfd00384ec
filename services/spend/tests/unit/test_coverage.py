"""Which budgets cover a run and the ledger keys of a call (nexus_spend.coverage)."""

from __future__ import annotations

from datetime import UTC, datetime

from nexus_events.events.budgets import BudgetDefinition

from nexus_spend.coverage import LedgerKey, RunScopes, call_keys, covering

AT = datetime(2026, 11, 28, 13, 0, tzinfo=UTC)
RUN = RunScopes(
    "r1", agent_id="impl", team="alpha", task_id="T-1", flow="feature", flow_run_id="fr1"
)


def budget(scope: str, period: str = "month", **kw: object) -> BudgetDefinition:
    body = {"id": f"b-{scope.replace(':', '-')}", "scope": scope, "period": period}
    return BudgetDefinition.model_validate({**body, "limits": {"cost_usd": 1}, **kw})


def test_a_call_is_settled_under_every_scope_kind_and_period_of_its_run() -> None:
    keys = call_keys(RUN, AT)
    assert len(keys) == 5 * 4
    assert LedgerKey("team", "alpha", "month", "2026-11") in keys
    assert LedgerKey("global", "", "day", "2026-11-28") in keys
    assert LedgerKey("flow_run", "fr1", "total", "total") in keys
    assert keys == sorted(keys)
    lone = call_keys(RunScopes("r2", agent_id="impl"), AT)
    assert {k.scope for k in lone} == {"global", "agent"}


def test_named_and_unnamed_scopes_cover_what_they_say() -> None:
    budgets = [
        (budget("team:alpha"), 1),
        (budget("team:beta"), 1),
        (budget("task", "total"), 2),
        (budget("flow_run:feature", "total"), 1),
        (budget("flow_run:other", "total"), 1),
        (budget("global", "week"), 3),
        (budget("agent:impl", "day"), 1),
    ]
    got = {
        (c.budget.id, c.key.instance, c.key.bucket, c.revision) for c in covering(budgets, RUN, AT)
    }
    assert got == {
        ("b-team-alpha", "team:alpha", "2026-11", 1),
        ("b-task", "task:T-1", "total", 2),
        ("b-flow_run-feature", "flow_run:fr1", "total", 1),
        ("b-global", "global", "2026-W48", 3),
        ("b-agent-impl", "agent:impl", "2026-11-28", 1),
    }
    assert covering(budgets, RunScopes("r3"), AT)[0].budget.id == "b-global"
    assert len(covering(budgets, RunScopes("r3"), AT)) == 1
