"""Budgets folded from the catalog (applied, revised, deleted; an invalid one dead-lettered),
a threshold announced once (also when a budget commits while the crossing turn's batch is in
its transaction), a usage event that cannot decode dead-lettered once, and the
queries' answers to bad requests and unknown budgets."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from typing import Any

import asyncpg
from nexus_events.contract import subjects
from nexus_events.contract.codec import Decoded
from nexus_events.contract.runstate import RunEvent
from nexus_events.contract.streams import BUDGETS, CATALOG, RUNS
from nexus_events.events import BudgetApplied, BudgetDeleted, BudgetThresholdCrossed, RunTurn
from nexus_events.events.budgets import BudgetDefinition, BudgetEvent
from nexus_events.transport.bus import Bus, decode_msg
from nexus_events.transport.projection import Conn, rebuild
from nexus_testing import dead_letters, eventually

from nexus_spend.metrics import SpendMetrics
from nexus_spend.projection import SpendProjection
from nexus_spend.projection_runner import SpendRunner

from .usage_harness import Run, apply_budget, ask, projecting, publish, publish_run, serving

ALPHA = {
    "id": "alpha-monthly",
    "scope": "team:alpha",
    "period": "month",
    "limits": {"cost_usd": 1.0},
    "warn_at": 0.5,
}


async def thresholds(bus: Bus) -> list[BudgetThresholdCrossed]:
    out = []
    async for msg in bus.replay_raw(
        BUDGETS,
        filter_subjects=(subjects.budget_events_filter(None, BudgetEvent.THRESHOLD_CROSSED),),
    ):
        event = decode_msg(msg).event
        assert isinstance(event, BudgetThresholdCrossed)
        out.append(event)
    return out


async def test_a_budget_applied_revised_deleted_and_an_invalid_one_dead_lettered(
    bus: Bus, pg_pool: asyncpg.Pool[Any]
) -> None:
    async with projecting(bus, pg_pool) as runner, serving(bus, pg_pool):
        await apply_budget(bus, ALPHA)
        # Published by hand, bypassing `nexus budgets apply`: no limit at all.
        bad = {"budget": {"id": "nolimit", "scope": "team:alpha", "period": "month", "limits": {}}}
        bad_ack = await bus.js.publish(
            subjects.catalog_event(subjects.CatalogKind.BUDGET, "nolimit", "applied"),
            json.dumps(bad).encode(),
        )
        # Valid, but on another budget's subject: not that budget's revision, nor its own.
        await bus.publish(
            subjects.catalog_event(subjects.CatalogKind.BUDGET, "elsewhere", "applied"),
            BudgetApplied(budget=BudgetDefinition.model_validate({**ALPHA, "id": "other"})),
        )
        last = await apply_budget(bus, {**ALPHA, "limits": {"cost_usd": 2.0}})
        await runner.wait_until(CATALOG, last)
        got = (await ask(bus, subjects.SPEND_BUDGETS_GET, {"id": "alpha-monthly"})).data
        assert (got["revision"], got["budget"]["limits"]["cost_usd"]) == (2, 2.0)
        revisions = await pg_pool.fetch(
            "SELECT revision FROM spend.budget_revisions WHERE budget_id = 'alpha-monthly'"
            " ORDER BY revision"
        )
        assert [r["revision"] for r in revisions] == [1, 2]
        listed = (await ask(bus, subjects.SPEND_BUDGETS_LIST, {})).data["budgets"]
        assert [b["budget"]["id"] for b in listed] == ["alpha-monthly"]
        assert (await ask(bus, subjects.SPEND_BUDGETS_LIST, {"team": "beta"})).data == {
            "budgets": []
        }
        letters = await eventually(
            lambda: dead_letters(bus),
            until=lambda ls: any(x.stream_seq == bad_ack.seq for x in ls),
            what="the invalid budget dead-lettered",
        )
        letter = next(x for x in letters if x.stream_seq == bad_ack.seq)
        assert "limits name none of cost_usd, tokens, runs" in f"{letter.reason}: {letter.error}"

        ack = await bus.publish(
            subjects.catalog_event(subjects.CatalogKind.BUDGET, "alpha-monthly", "deleted"),
            BudgetDeleted(deleted_by="test"),
        )
        await runner.wait_until(CATALOG, ack.seq)
        gone = await ask(bus, subjects.SPEND_BUDGETS_GET, {"id": "alpha-monthly"})
        assert (gone.error_code, gone.message) == ("404", "no budget 'alpha-monthly'")
        assert (await ask(bus, subjects.SPEND_BUDGETS_LIST, {})).data == {"budgets": []}


async def test_a_threshold_is_announced_once_per_budget_scope_and_period(
    bus: Bus, pg_pool: asyncpg.Pool[Any]
) -> None:
    async with projecting(bus, pg_pool) as runner:
        await apply_budget(bus, ALPHA)
        applied = await apply_budget(
            bus, {**ALPHA, "id": "task-total", "scope": "task", "period": "total"}
        )
        # The budgets first: NEXUS_CATALOG and NEXUS_RUNS are read apart, and a turn folded
        # before its budget crosses nothing (a loaded full run announced none).
        await runner.wait_until(CATALOG, applied)
        # 0.25 of 1.00: below warn_at 0.5. Then 0.5, then 0.75 and 1.0: announced once each.
        last = await publish_run(
            bus, Run("t1", task_id="T-1", turns=[(1, 10, 1, 0.25)], ends=False)
        )
        await runner.wait_until(RUNS, last)
        assert await thresholds(bus) == []
        for turn in (2, 3, 4):  # one batch each: the first crosses
            last = await publish(bus, "t1", RunTurn(turn=turn, tokens_in=5, cost_usd=0.25))
            await runner.wait_until(RUNS, last)
        # Another team's run does not touch alpha's budget; the task budget covers it apart.
        last = await publish_run(bus, Run("t2", team="beta", task_id="T-2", turns=[(1, 1, 1, 0.1)]))
        await runner.wait_until(RUNS, last)
        announced = await eventually(
            lambda: thresholds(bus), until=lambda t: len(t) >= 2, what="both announced"
        )
        by_budget = {t.budget_id: t for t in announced}
        assert len(announced) == 2, announced
        team = by_budget["alpha-monthly"]
        assert (team.instance, team.revision, team.share, team.limit_cost_usd) == (
            "team:alpha",
            1,
            0.5,
            1.0,
        )
        assert team.task_id is None
        task = by_budget["task-total"]
        assert (task.instance, task.bucket, task.task_id) == ("task:T-1", "total", "T-1")
        # Folded back: the record says announced, and more spend announces nothing new.
        await eventually(
            lambda: pg_pool.fetchval("SELECT count(*) FROM spend.thresholds"),
            until=lambda n: n == 2,
            what="the thresholds folded back",
        )
        last = await publish(bus, "t1", RunTurn(turn=5, tokens_in=5, cost_usd=0.25))
        await runner.wait_until(RUNS, last)
        assert len(await thresholds(bus)) == 2


async def test_a_negative_cost_cannot_decode_and_is_dead_lettered_once(
    bus: Bus, pg_pool: asyncpg.Pool[Any]
) -> None:
    async with projecting(bus, pg_pool) as runner:
        last = await publish_run(bus, Run("n1", turns=[(1, 10, 1, 0.5)], ends=False))
        body = {"turn": 2, "tokens_in": 10, "tokens_out": 1, "cost_usd": -3.0}
        bad = await bus.js.publish(
            subjects.run_event("n1", RunEvent.TURN), json.dumps(body).encode()
        )
        last = await publish(bus, "n1", RunTurn(turn=3, tokens_in=10, cost_usd=0.25))
        await runner.wait_until(RUNS, last)
        cost = await pg_pool.fetchval("SELECT cost_usd FROM spend.runs WHERE run_id = 'n1'")
        assert cost == 0.75

        async def letters() -> list[Any]:
            return [x for x in await dead_letters(bus) if x.stream_seq == bad.seq]

        found = await eventually(letters, until=lambda ls: len(ls) >= 1, what="dead-lettered")
        assert found[0].stream == RUNS
        assert "cost_usd" in f"{found[0].reason}: {found[0].error}"
        assert await rebuild(bus, pg_pool, SpendProjection()) > 0
        assert await pg_pool.fetchval("SELECT cost_usd FROM spend.runs WHERE run_id = 'n1'") == 0.75
    assert len(await letters()) == 1


async def test_bad_requests_are_400_in_one_line_and_runs_show_their_scopes(
    bus: Bus, pg_pool: asyncpg.Pool[Any]
) -> None:
    async with projecting(bus, pg_pool) as runner, serving(bus, pg_pool):
        for subject, body in (
            (subjects.SPEND_USAGE, {"by": "colour"}),
            (subjects.SPEND_USAGE, {"teem": "alpha"}),
            (subjects.SPEND_USAGE, b"not json"),
            (subjects.SPEND_USAGE, {"since": "2026-11-02", "until": "2026-11-01"}),
            (subjects.SPEND_BUDGETS_GET, {}),
            (subjects.SPEND_BUDGETS_GET, {"id": "a.b"}),
            (subjects.SPEND_RUNS, {"run_ids": []}),
        ):
            reply = await ask(bus, subject, body)
            assert reply.error_code == "400", (subject, body, reply)
            assert reply.message
            assert "\n" not in reply.message
        missing = await ask(bus, subjects.SPEND_BUDGETS_GET, {"id": "nope"})
        assert missing.error_code == "404"

        applied = await apply_budget(bus, ALPHA)
        last = await publish_run(bus, Run("q1", turns=[(1, 10, 1, 0.75)], ends=False))
        # Two streams, read apart: the budget must be in too for the run to show its scope.
        await runner.wait_until(CATALOG, applied)
        await runner.wait_until(RUNS, last)
        reply = await ask(bus, subjects.SPEND_RUNS, {"run_ids": ["q1", "unknown", "q1"]})
        assert reply.error_code is None, reply.message
        (run,) = reply.data["runs"]
        assert (run["run_id"], run["team"], run["usage"]["cost_usd"]) == ("q1", "alpha", 0.75)
        assert [(s["budget_id"], s["instance"], s["state"]) for s in run["scopes"]] == [
            ("alpha-monthly", "team:alpha", "warning")
        ]
        assert run["waiting_for"] is None


class HeldProjection(SpendProjection):
    """Holds the transaction of the first batch with a turn open (after it staged what it
    announces) until released, so the other feeds can commit meanwhile."""

    def __init__(self) -> None:
        super().__init__()
        self.holding = asyncio.Event()
        self.release = asyncio.Event()

    async def apply(self, conn: Conn, schema: str, batch: Sequence[Decoded]) -> None:
        await super().apply(conn, schema, batch)
        turns = any(isinstance(d.event, RunTurn) for d in batch)
        if turns and schema == self.schema and not self.holding.is_set():
            self.holding.set()
            await self.release.wait()


async def test_a_budget_applied_while_a_turn_commits_does_not_lose_its_announcement(
    bus: Bus, pg_pool: asyncpg.Pool[Any]
) -> None:
    """The three sources are followed concurrently: a budget batch handed off while a turn's
    batch is still in its transaction neither clears nor takes what the turn staged."""

    async def leader() -> bool:
        return True

    held = HeldProjection()
    runner = SpendRunner(bus, pg_pool, held, metrics=SpendMetrics(), fence=leader)
    await runner.setup()
    await runner.start()
    try:
        applied = await apply_budget(bus, ALPHA)
        await runner.wait_until(CATALOG, applied)
        await publish_run(bus, Run("h1", turns=[(1, 10, 1, 0.75)], ends=False))
        await asyncio.wait_for(held.holding.wait(), 10)
        other = await apply_budget(bus, {**ALPHA, "id": "other-team", "scope": "team:beta"})
        await runner.wait_until(CATALOG, other)  # committed and handed off meanwhile
        held.release.set()
        announced = await eventually(
            lambda: thresholds(bus), until=lambda t: len(t) == 1, what="the crossing announced"
        )
        assert (announced[0].budget_id, announced[0].share) == ("alpha-monthly", 0.75)
    finally:
        held.release.set()
        await runner.stop()
