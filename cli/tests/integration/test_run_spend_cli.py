"""`nexus attach` with the run's spend: a run recorded on a real nats-server and projected by a
real core; its spend against each covering scope comes from a stand-in for the spend
service's ``nexus.spend.v1.runs`` (spend_responder.py). Without the spend service the run
shows as before, without spend lines, and exits 0."""

from __future__ import annotations

import json
from pathlib import Path

from nexus_core.app import CoreApp
from nexus_events.contract.runstate import RunStatus
from nexus_events.events.budgets import BudgetPeriod, OnExceed
from nexus_events.events.spend import RunSpend, RunsSpend, ScopeStanding, StandingState, UsageLine
from nexus_events.transport.bus import Bus
from tests.support.cli import nexus

from .lab_recordings import Step, apply_lab_agent, completed, projected, record_run
from .spend_responder import SpendResponder, spend_service

ALPHA = ScopeStanding(
    budget_id="alpha-monthly",
    instance="team:alpha",
    period=BudgetPeriod.MONTH,
    bucket="2026-11",
    on_exceed=OnExceed.ASK,
    state=StandingState.OK,
    spent_cost_usd=31.2,
    limit_cost_usd=50.0,
)
SPEND = RunSpend(
    run_id="run_a",
    team="alpha",
    usage=UsageLine(
        key="run_a", runs=1, turns=2, tokens_in=20, tokens_out=10, cost_usd=0.002, wall_seconds=3
    ),
    scopes=[ALPHA],
)


async def _recorded(core: CoreApp, bus: Bus) -> None:
    await apply_lab_agent(bus, core.catalog_fresh)
    await record_run(bus, "run_a", [[Step("read_file")], [Step("finish")]], completed(2))
    await projected(bus, "run_a", RunStatus.COMPLETED, 2)


async def test_attach_shows_the_runs_spend_against_each_scope(
    core: CoreApp, bus: Bus, nats_url: str, tmp_path: Path
) -> None:
    await _recorded(core, bus)
    async with spend_service(bus, SpendResponder(runs=[SPEND])) as spend:
        result = await nexus(nats_url, tmp_path, "attach", "run_a")
        assert result.exit_code == 0, result.output
        lines = [line.strip() for line in result.stdout.splitlines()]
        assert "team     alpha" in lines
        assert "team:alpha month 2026-11: $31.20 of $50.00 (62 %) (alpha-monthly)" in lines
        assert spend.queries == [RunsSpend(run_ids=["run_a"])]
        as_json = await nexus(nats_url, tmp_path, "attach", "run_a", "-o", "json")
        assert RunSpend.model_validate(json.loads(as_json.stdout)["spend"]) == SPEND


async def test_attach_without_the_spend_service_shows_the_run_without_spend(
    core: CoreApp, bus: Bus, nats_url: str, tmp_path: Path
) -> None:
    await _recorded(core, bus)
    result = await nexus(nats_url, tmp_path, "attach", "run_a")
    assert result.exit_code == 0, result.output
    assert "run run_a" in result.stdout
    assert "budgets:" not in result.stdout
    assert result.stderr == ""
    as_json = await nexus(nats_url, tmp_path, "attach", "run_a", "-o", "json")
    assert json.loads(as_json.stdout)["spend"] is None
