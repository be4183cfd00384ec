"""Reservations, admissions and asks on real NATS and PostgreSQL (docs/spend.md): the bound
holds under concurrency and across replicas, a reached `ask` budget opens one ask however
many runs reach it and an approval extends it once; a run is admitted once; standings."""

from __future__ import annotations

import asyncio
from collections import Counter
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
import pytest
from nexus_events.contract import subjects
from nexus_events.contract.runstate import RunEvent
from nexus_events.contract.streams import BUDGETS, RUNS
from nexus_events.events import (
    ApprovalDecided,
    ApprovalDecision,
    ApprovalRequested,
    BudgetAskOpened,
    BudgetExtended,
    RunRequested,
)
from nexus_events.events.budgets import BUDGET_ASK_TOOL, BudgetDefinition, BudgetEvent
from nexus_events.events.spend import SpendDecision, SpendReserve, SpendVerdict, StandingState
from nexus_events.runtime.clock import ManualClock
from nexus_events.transport.bus import Bus

from nexus_spend.asks import AskDecisions
from nexus_spend.coverage import RunScopes
from nexus_spend.reservations import Reservations
from nexus_spend.schema import LIVE_SCHEMA
from nexus_spend.standing import standings_for_budget, standings_for_run

from .harness import (
    ASK,
    AT,
    SCOPE,
    alpha,
    call,
    events,
    fold_budget_record,
    holds,
    prepared,
    put_budget,
    put_run,
    put_spent,
    until,
)


async def test_ten_runs_at_once_get_three_calls_then_wait_on_one_ask(
    db: asyncpg.Pool[Any], bus: Bus, res: Reservations, clock: ManualClock
) -> None:
    await put_budget(db, alpha(3.0, **ASK))
    runs = [f"r{i}" for i in range(10)]
    for run_id in runs:
        await put_run(db, run_id)
    verdicts = await asyncio.gather(*(res.reserve(r, call()) for r in runs))
    counted = Counter(v.decision for v in verdicts)
    assert counted == {SpendDecision.GRANTED: 3, SpendDecision.WAIT: 7}
    held = await holds(db)
    assert len(held) == 3
    assert sum(h["cost_usd"] for h in held) == 3.0
    granted = {
        r for r, v in zip(runs, verdicts, strict=True) if v.decision is SpendDecision.GRANTED
    }
    assert {h["run_id"] for h in held} == granted
    asks = {v.ask_run_id for v in verdicts if v.decision is SpendDecision.WAIT}
    assert len(asks) == 1
    (ask_id,) = asks
    assert ask_id is not None
    waiting = next(v for v in verdicts if v.decision is SpendDecision.WAIT)
    assert waiting.blocking is not None
    assert waiting.blocking.state is StandingState.ASKING
    assert waiting.message.startswith(f"{SCOPE} reached ($3.00 of $3.00)")
    # One ask and one approval request on the streams, however many runs asked.
    opened = await events(bus, BUDGETS, subjects.budget_event(ask_id, BudgetEvent.ASK_OPENED))
    assert len(opened) == 1
    assert isinstance(opened[0], BudgetAskOpened)
    assert (opened[0].round, opened[0].extend_cost_usd, opened[0].approvers) == (
        1,
        2.0,
        ["team:alpha"],
    )
    assert opened[0].expires_at == AT + timedelta(seconds=60)
    requested = await events(bus, RUNS, subjects.run_event(ask_id, RunEvent.APPROVAL_REQUESTED))
    assert len(requested) == 1
    assert isinstance(requested[0], ApprovalRequested)
    assert requested[0].tool == BUDGET_ASK_TOOL
    assert requested[0].summary == "extend team:alpha's budget alpha-monthly by $2.00 for 2026-11"

    # Asked again before the projection folded the ask: still one ask on the streams.
    await put_run(db, "x1")
    await put_run(db, "x2")
    again = await res.reserve("x1", call())
    assert (again.decision, again.ask_run_id) == (SpendDecision.WAIT, ask_id)
    await fold_budget_record(bus, db)
    assert (await res.reserve("x2", call())).ask_run_id == ask_id
    assert len(await events(bus, BUDGETS, subjects.budget_events_filter(ask_id))) == 1

    # An approver approves on the ask's inbox: approval_decided and extended, once each.
    decisions = AskDecisions(db, bus, clock, fetch_timeout=0.2)
    await decisions.start()
    try:
        answer = ApprovalDecision(
            approval_id="extend", decision="approve", decided_by="nats:alice", surface="cli"
        )
        for _ in range(2):  # a duplicate answer changes nothing
            await bus.publish(subjects.inbox(ask_id), answer)
            await bus.publish(subjects.inbox(ask_id), answer, msg_id="another-copy")

        async def extended() -> bool:
            got = await events(bus, BUDGETS, subjects.budget_event(ask_id, BudgetEvent.EXTENDED))
            return bool(got)

        await until(extended, "the ask's extension")
        await asyncio.sleep(0.5)  # let the duplicate answers through
    finally:
        await decisions.stop()
    decided = await events(bus, RUNS, subjects.run_event(ask_id, RunEvent.APPROVAL_DECIDED))
    assert len(decided) == 1
    assert isinstance(decided[0], ApprovalDecided)
    assert (decided[0].decision, decided[0].decided_by) == ("approved", "nats:alice")
    recorded = await events(bus, BUDGETS, subjects.budget_events_filter(ask_id))
    assert [type(e) for e in recorded] == [BudgetAskOpened, BudgetExtended]
    assert isinstance(recorded[1], BudgetExtended)
    assert recorded[1].cost_usd == 2.0

    # Folded: the limit is $5, two more calls fit, the third opens round 2.
    await fold_budget_record(bus, db)
    more = [await res.reserve(r, call(turn=2)) for r in ("r7", "r8", "r9")]
    assert [v.decision for v in more] == [
        SpendDecision.GRANTED,
        SpendDecision.GRANTED,
        SpendDecision.WAIT,
    ]
    assert more[0].scopes[0].limit_cost_usd == 5.0
    assert more[2].ask_run_id not in (None, ask_id)


async def test_a_resumed_attempt_replaces_its_hold(
    db: asyncpg.Pool[Any], res: Reservations
) -> None:
    await put_budget(db, alpha(1.5))
    await put_run(db, "r1")
    assert (await res.reserve("r1", call(1, 1.0))).decision is SpendDecision.GRANTED
    resumed = SpendReserve(turn=1, attempt=2, cost_usd=1.2, tokens=100)
    assert (await res.reserve("r1", resumed)).decision is SpendDecision.GRANTED
    held = await holds(db)
    assert [(h["run_id"], h["turn"], h["cost_usd"]) for h in held] == [("r1", 1, 1.2)]
    # The run's next turn counts the held one: 1.2 + 1.0 > 1.5.
    nxt = await res.reserve("r1", call(2, 1.0))
    assert nxt.decision is SpendDecision.STOP
    assert nxt.message == f"{SCOPE} reached ($2.20 of $1.50)"


async def test_a_hold_replaced_in_the_next_period_drops_the_old_one(
    db: asyncpg.Pool[Any], res: Reservations, clock: ManualClock
) -> None:
    await put_budget(db, alpha(1.0))
    await put_run(db, "r1")
    clock.set(datetime(2026, 11, 30, 23, 59, 59, tzinfo=UTC))
    assert (await res.reserve("r1", call(1, 0.7))).decision is SpendDecision.GRANTED
    clock.set(datetime(2026, 12, 1, 0, 0, 1, tzinfo=UTC))
    assert (await res.reserve("r1", call(1, 0.8))).decision is SpendDecision.GRANTED
    held = await holds(db)
    assert [(h["bucket"], h["cost_usd"]) for h in held] == [("2026-12", 0.8)]


async def test_admission_counts_a_run_once(db: asyncpg.Pool[Any], res: Reservations) -> None:
    runs_budget = BudgetDefinition.model_validate(
        {"id": "alpha-runs", "scope": "team:alpha", "period": "day", "limits": {"runs": 2}}
    )
    await put_budget(db, runs_budget)
    for r in ("r1", "r2", "r3"):
        await put_run(db, r)
    assert (await res.admit("r1")).decision is SpendDecision.GRANTED
    assert (await res.admit("r1")).decision is SpendDecision.GRANTED
    admitted = await db.fetchval(
        f"""SELECT count(DISTINCT run_id) FROM {LIVE_SCHEMA}.admissions
            WHERE scope = 'team' AND name = 'alpha' AND period = 'day'"""
    )
    assert admitted == 1
    second = await res.admit("r2")
    assert second.decision is SpendDecision.GRANTED
    assert second.scopes[0].runs == 1  # the others admitted before it
    third = await res.admit("r3")
    assert third.decision is SpendDecision.STOP
    assert third.message == "budget alpha-runs: team:alpha day 2026-11-28 reached (2 of 2 runs)"
    assert (await res.admit("r2")).decision is SpendDecision.GRANTED  # already counted


async def test_runs_admitted_at_once_fill_the_run_limit_exactly(
    db: asyncpg.Pool[Any], res: Reservations
) -> None:
    runs_budget = BudgetDefinition.model_validate(
        {"id": "alpha-runs", "scope": "team:alpha", "period": "day", "limits": {"runs": 3}}
    )
    await put_budget(db, runs_budget)
    runs = [f"r{i}" for i in range(8)]
    for r in runs:
        await put_run(db, r)
    verdicts = await asyncio.gather(*(res.admit(r) for r in runs))
    assert Counter(v.decision for v in verdicts) == {
        SpendDecision.GRANTED: 3,
        SpendDecision.STOP: 5,
    }


async def test_two_replicas_never_grant_past_the_limit(
    db: asyncpg.Pool[Any], pg_dsn: str, bus: Bus, clock: ManualClock
) -> None:
    await put_budget(db, alpha(5.0))
    other_pool = await asyncpg.create_pool(pg_dsn, min_size=1, max_size=4)
    assert other_pool is not None
    try:
        replicas = [Reservations(db, bus, clock), Reservations(other_pool, bus, clock)]
        runs = [f"r{i}" for i in range(24)]
        for r in runs:
            await put_run(db, r)

        async def two_calls(i: int, run_id: str) -> list[SpendVerdict]:
            replica = replicas[i % 2]
            return [await replica.reserve(run_id, call(t, 0.5)) for t in (1, 2)]

        results = await asyncio.gather(*(two_calls(i, r) for i, r in enumerate(runs)))
    finally:
        await other_pool.close()
    granted = [v for pair in results for v in pair if v.decision is SpendDecision.GRANTED]
    assert len(granted) == 10
    total = await db.fetchval(f"SELECT sum(cost_usd) FROM {LIVE_SCHEMA}.holds")
    assert total == 5.0


async def test_run_scopes_come_from_the_stream_before_the_projection(
    db: asyncpg.Pool[Any], bus: Bus, res: Reservations
) -> None:
    flow_budget = BudgetDefinition.model_validate(
        {
            "id": "feature-runs",
            "scope": "flow_run:feature",
            "period": "total",
            "limits": {"cost_usd": 1},
        }
    )
    await put_budget(db, flow_budget)
    unknown = await res.reserve("ghost", call())
    assert (unknown.decision, unknown.message) == (SpendDecision.STOP, "run ghost is unknown")
    requested = RunRequested(agent_id="impl", labels={"flow": "feature", "flow_run_id": "fr-1"})
    await bus.publish(subjects.run_event("s1", RunEvent.REQUESTED), requested)
    await bus.publish(subjects.run_event("s1", RunEvent.PREPARED), prepared("s1", team="beta"))
    assert (await res.reserve("s1", call(1, 0.6))).decision is SpendDecision.GRANTED
    stop = await res.reserve("s1", call(2, 0.6))
    assert stop.message == "budget feature-runs: flow_run:fr-1 total total reached ($1.20 of $1.00)"
    held = await holds(db)
    assert [(h["scope"], h["name"]) for h in held] == [("flow_run", "fr-1")]


async def test_standings_of_a_budget_and_of_a_run(db: asyncpg.Pool[Any], res: Reservations) -> None:
    await put_budget(db, alpha(4.0))
    every_task = BudgetDefinition.model_validate(
        {"id": "tasks", "scope": "task", "period": "total", "limits": {"cost_usd": 1}}
    )
    await put_budget(db, every_task)
    await put_run(db, "r1", task_id="T-1")
    await put_run(db, "r2", task_id="T-2")
    await put_spent(db, "team", "alpha", "month", "2026-11", 2.0)
    assert (await res.reserve("r1", call(1, 0.9))).decision is SpendDecision.GRANTED
    assert (await res.reserve("r2", call(1, 0.5))).decision is SpendDecision.GRANTED
    async with db.acquire() as conn:
        (team,) = await standings_for_budget(conn, alpha(4.0), 1, AT)
        tasks = await standings_for_budget(conn, every_task, 1, AT)
        scopes = RunScopes("r2", team="alpha", task_id="T-2")
        mine = await standings_for_run(conn, scopes, [(every_task, 1)], AT)
    assert (team.instance, team.spent_cost_usd) == ("team:alpha", 2.0)
    assert team.reserved_cost_usd == pytest.approx(1.4)
    assert team.state is StandingState.WARNING  # 3.4 of 4.0 is past 0.8
    assert [(s.instance, s.reserved_cost_usd, s.state) for s in tasks] == [
        ("task:T-1", 0.9, StandingState.WARNING),
        ("task:T-2", 0.5, StandingState.OK),
    ]
    assert [(s.budget_id, s.instance) for s in mine] == [("tasks", "task:T-2")]
