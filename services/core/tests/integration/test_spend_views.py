"""Spend in core on real NATS + PostgreSQL (docs/spend.md): the team a run counts against is
resolved at assembly (request, task, agent), agent_runs shows it and why a budget holds the
run, and a budget applied to the catalog is left to the spend service, not dead-lettered."""

from __future__ import annotations

from typing import Any

from nexus_events.contract import subjects
from nexus_events.contract.streams import DLQ
from nexus_events.contract.subjects import CatalogKind
from nexus_events.events import (
    Column,
    DeadLetter,
    RunBudgetPaused,
    RunBudgetResumed,
    RunDispatched,
    RunPrepared,
    RunQueued,
    RunRequested,
    RunStarted,
    TaskCreated,
    TaskUpdated,
)
from nexus_events.events.budgets import BudgetApplied, BudgetDefinition
from nexus_events.transport.bus import Bus
from nexus_events.transport.catalog_commands import apply_agent, apply_skill

from nexus_core.app import CoreApp

from .support import AGENT_YAML, SKILL_MD, catalog_ready, eventually, query, run_events

TEAM_AGENT_YAML = AGENT_YAML.replace("id: implementer", "id: team-agent") + "team: agents\n"


async def _prepared_team(bus: Bus, run_id: str, request: RunRequested) -> str | None:
    await bus.publish(subjects.run_event(run_id, "requested"), request)
    events = await eventually(
        lambda: run_events(bus, run_id),
        lambda evs: any(isinstance(d.event, RunPrepared) for d in evs),
        what=f"{run_id} prepared",
    )
    prepared = next(d.event for d in events if isinstance(d.event, RunPrepared))
    team: str | None = prepared.config.team
    return team


async def _task_team_projected(core: CoreApp, task_id: str, team: str) -> None:
    async def seen() -> bool:
        got = await core.pool.fetchval(
            "SELECT team FROM core_board.tasks WHERE task_id = $1", task_id
        )
        return bool(got == team)

    await eventually(seen, what=f"{task_id}'s team {team}")


async def test_the_team_is_the_requests_else_the_tasks_else_the_agents(bus: Bus, core: CoreApp):
    await apply_agent(bus, TEAM_AGENT_YAML)
    await apply_skill(bus, SKILL_MD)
    await catalog_ready(core)
    await bus.publish(
        subjects.task_event("T-team", "created"),
        TaskCreated(title="Fix", column=Column.TODO, team="alpha"),
    )
    await _task_team_projected(core, "T-team", "alpha")

    of_task = RunRequested(agent_id="team-agent", task_id="T-team")
    assert await _prepared_team(bus, "t-task", of_task) == "alpha"
    asked = of_task.model_copy(update={"team": "asked"})
    assert await _prepared_team(bus, "t-asked", asked) == "asked"
    alone = RunRequested(agent_id="team-agent")
    assert await _prepared_team(bus, "t-agent", alone) == "agents"

    # A task's team changed by an update counts for the runs assembled after it.
    await bus.publish(subjects.task_event("T-team", "updated"), TaskUpdated(team="beta"))
    await _task_team_projected(core, "T-team", "beta")
    assert await _prepared_team(bus, "t-task-2", of_task) == "beta"
    # An update naming no team keeps the task's.
    await bus.publish(subjects.task_event("T-team", "updated"), TaskUpdated(title="Fix it"))
    await eventually(
        lambda: core.pool.fetchval("SELECT title FROM core_board.tasks WHERE task_id = 'T-team'"),
        lambda title: title == "Fix it",
    )
    assert await _prepared_team(bus, "t-task-3", of_task) == "beta"


async def _view(bus: Bus, run_id: str, check: Any) -> dict[str, Any]:
    async def get() -> dict[str, Any]:
        _, body = await query(bus, subjects.CORE_RUNS_GET, {"run_id": run_id})
        return body  # type: ignore[no-any-return]

    return await eventually(get, check, what=f"{run_id}'s view")


async def test_agent_runs_shows_the_team_and_why_a_budget_holds_the_run(bus: Bus, core: CoreApp):
    await apply_agent(bus, TEAM_AGENT_YAML)
    await apply_skill(bus, SKILL_MD)
    await catalog_ready(core)
    run_id = "t-held"
    await bus.publish(subjects.run_event(run_id, "requested"), RunRequested(agent_id="team-agent"))
    await _view(bus, run_id, lambda v: v.get("status") == "prepared")

    reason = "budget alpha-monthly: team:alpha month 2026-11 reached ($50.02 of $50.00)"
    await bus.publish(
        subjects.run_event(run_id, "queued"),
        RunQueued(position=1, limit="budget", waiting_for=reason),
    )
    view = await _view(bus, run_id, lambda v: v.get("status") == "queued")
    assert (view["team"], view["budget_wait"]) == ("agents", reason)

    await bus.publish(
        subjects.run_event(run_id, "dispatched"), RunDispatched(runtime="local", handle="h")
    )
    await bus.publish(subjects.run_event(run_id, "started"), RunStarted())
    view = await _view(bus, run_id, lambda v: v.get("status") == "running")
    assert view["budget_wait"] is None

    asking = "budget alpha-monthly reached: asking team:alpha for $10"
    await bus.publish(
        subjects.run_event(run_id, "budget_paused"),
        RunBudgetPaused(
            budget_id="alpha-monthly",
            instance="team:alpha",
            bucket="2026-11",
            turn=3,
            message=asking,
        ),
    )
    view = await _view(bus, run_id, lambda v: v.get("status") == "awaiting_approval")
    assert view["budget_wait"] == asking
    row = await core.pool.fetchrow(
        "SELECT team, budget_wait FROM core_agent_runs.agent_runs WHERE run_id = $1", run_id
    )
    assert (row["team"], row["budget_wait"]) == ("agents", asking)

    await bus.publish(
        subjects.run_event(run_id, "budget_resumed"),
        RunBudgetResumed(budget_id="alpha-monthly", turn=3, waited_seconds=4.0),
    )
    view = await _view(bus, run_id, lambda v: v.get("status") == "running")
    assert view["budget_wait"] is None


async def test_a_budget_applied_to_the_catalog_is_not_dead_lettered_by_core(
    bus: Bus, core: CoreApp
):
    await apply_agent(bus, AGENT_YAML)
    await catalog_ready(core)
    budget = BudgetDefinition.model_validate(
        {
            "id": "alpha-monthly",
            "scope": "team:alpha",
            "period": "month",
            "limits": {"cost_usd": 50},
        }
    )
    ack = await bus.publish(
        subjects.catalog_event(CatalogKind.BUDGET, "alpha-monthly", "applied"),
        BudgetApplied(budget=budget),
    )
    await apply_agent(bus, AGENT_YAML.replace("You implement tasks.", "You implement, v2."))
    await catalog_ready(core)  # past the budget and the agent after it
    letters = [DeadLetter.model_validate_json(m.data) async for m in bus.replay_raw(DLQ)]
    assert [x for x in letters if x.stream_seq == ack.seq] == []
    _, agent = await query(bus, subjects.CORE_CATALOG_AGENTS_GET, {"id": "implementer"})
    assert agent["revision"] == 2
