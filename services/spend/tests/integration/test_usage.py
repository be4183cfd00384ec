"""Usage folded from NEXUS_RUNS: grouped by agent, team, model and day it equals the sum of the
events (a resumed turn once, with its larger usage; a condensation's own call counted); the
ledger's total equals the runs'; a rebuild equals the live tables; holds settle on a turn and
on the run's ending."""

from __future__ import annotations

from collections import defaultdict
from datetime import UTC, datetime
from typing import Any

import asyncpg
from nexus_events.contract import subjects
from nexus_events.contract.streams import RUNS
from nexus_events.events import RunCompleted, RunTurn
from nexus_events.transport.bus import Bus
from nexus_events.transport.projection import rebuild

from nexus_spend.projection import SpendProjection

from .usage_harness import Run, ask, projecting, publish, publish_run, serving

RUNS_PUBLISHED = [
    Run("r1", agent="impl", team="alpha", model="m-small",
        turns=[(1, 100, 10, 0.25), (2, 200, 20, 0.5)]),
    Run("r2", agent="impl", team="beta", model="m-large", turns=[(1, 300, 30, 1.5)],
        condensed=[(1, 50, 5, 0.125)]),
    Run("r3", agent="review", team="alpha", model="m-large", task_id="T-1",
        flow="feature", flow_run_id="fr-1", turns=[(1, 10, 1, 0.0625)]),
    Run("r4", agent="review", team=None, model="m-small", turns=[], ends=False),
]  # fmt: skip


# After them: resumed attempts publish r1's turn 2 again, larger, then its turn 1 again,
# smaller (each counted once, with the larger usage field by field), and a turn of a run never
# requested (published by hand) counts under no scope name.
RESUMED = (
    ("r1", RunTurn(turn=2, tokens_in=260, tokens_out=20, cost_usd=0.75)),
    ("r1", RunTurn(turn=1, tokens_in=50, tokens_out=12, cost_usd=0.125)),
)
BY_HAND = ("r5", RunTurn(turn=1, tokens_in=7, tokens_out=3, cost_usd=0.5))


def expected(by: str) -> dict[str | None, tuple[int, int, int, float]]:
    """(runs, calls, tokens in + out, USD) per key, summed from what was published."""
    out: dict[str | None, list[float]] = defaultdict(lambda: [0, 0, 0, 0.0])
    for run in RUNS_PUBLISHED:
        key = {"agent": run.agent, "team": run.team, "model": run.model}[by]
        row = out[key]
        row[0] += 1
        turns = {t[0]: t[1:] for t in run.turns}
        for run_id, t in RESUMED:
            if run_id == run.run_id:
                tin, tout, cost = turns[t.turn]
                turns[t.turn] = (
                    max(tin, t.tokens_in),
                    max(tout, t.tokens_out),
                    max(cost, t.cost_usd),
                )
        for tin, tout, cost in [*turns.values(), *(c[1:] for c in run.condensed)]:
            row[1] += 1
            row[2] += tin + tout
            row[3] += cost
    hand = out[None]
    hand[0] += 1
    hand[1] += 1
    hand[2] += 10
    hand[3] += 0.5
    return {k: (int(v[0]), int(v[1]), int(v[2]), v[3]) for k, v in out.items()}


def got(report: dict[str, Any]) -> dict[str | None, tuple[int, int, int, float]]:
    return {
        r["key"]: (r["runs"], r["turns"], r["tokens_in"] + r["tokens_out"], r["cost_usd"])
        for r in report["rows"]
    }


async def table(pool: asyncpg.Pool[Any], sql: str) -> list[tuple[Any, ...]]:
    return [tuple(r) for r in await pool.fetch(sql)]


async def test_usage_by_agent_team_model_and_day_is_the_sum_of_the_events(
    bus: Bus, pg_pool: asyncpg.Pool[Any]
) -> None:
    async with projecting(bus, pg_pool) as runner, serving(bus, pg_pool):
        last = 0
        for run in RUNS_PUBLISHED:
            last = await publish_run(bus, run)
        for run_id, turn in (*RESUMED, BY_HAND):
            last = await publish(bus, run_id, turn)
        await runner.wait_until(RUNS, last)
        for by in ("agent", "team", "model"):
            reply = await ask(bus, subjects.SPEND_USAGE, {"by": by})
            assert reply.error_code is None, reply.message
            assert got(reply.data) == expected(by), by
        models = (await ask(bus, subjects.SPEND_USAGE, {"by": "model"})).data["rows"]
        costs = [r["cost_usd"] for r in models]
        assert costs == sorted(costs, reverse=True)  # costliest first
        today = datetime.now(UTC).date().isoformat()
        day = (await ask(bus, subjects.SPEND_USAGE, {"by": "day"})).data
        assert [r["key"] for r in day["rows"]] == [today]
        total = day["total"]
        assert (total["runs"], total["turns"]) == (5, 6)
        assert abs(total["cost_usd"] - (0.25 + 0.75 + 1.5 + 0.125 + 0.0625 + 0.5)) < 1e-9
        # The filters: a team, a flow.
        alpha = (await ask(bus, subjects.SPEND_USAGE, {"by": "run", "team": "alpha"})).data
        assert {r["key"] for r in alpha["rows"]} == {"r1", "r3"}
        flow = (await ask(bus, subjects.SPEND_USAGE, {"by": "flow_run", "flow": "feature"})).data
        assert [(r["key"], r["cost_usd"]) for r in flow["rows"]] == [("fr-1", 0.0625)]
        revision = (await ask(bus, subjects.SPEND_USAGE, {"by": "agent_revision"})).data
        assert {r["key"] for r in revision["rows"]} == {"impl@2", "review@2", None}

        # The ledger's settled total is the runs' total, per period.
        runs_total = await pg_pool.fetchrow(
            "SELECT sum(cost_usd) AS c, sum(tokens_in + tokens_out) AS t, sum(calls) AS n"
            " FROM spend.runs"
        )
        for period in ("day", "week", "month", "total"):
            ledger = await pg_pool.fetchrow(
                "SELECT cost_usd AS c, tokens AS t, calls AS n FROM spend.ledger"
                " WHERE scope = 'global' AND period = $1",
                period,
            )
            assert ledger is not None
            assert runs_total is not None
            assert abs(ledger["c"] - runs_total["c"]) < 1e-9
            assert (ledger["t"], ledger["n"]) == (runs_total["t"], runs_total["n"])
        team = await pg_pool.fetchval(
            "SELECT cost_usd FROM spend.ledger WHERE scope = 'team' AND name = 'alpha'"
            " AND period = 'total'"
        )
        assert abs(team - (0.25 + 0.75 + 0.0625)) < 1e-9
        flow_run = await pg_pool.fetchval(
            "SELECT calls FROM spend.ledger WHERE scope = 'flow_run' AND name = 'fr-1'"
            " AND period = 'total'"
        )
        assert flow_run == 1

        # Wall time of the ended runs, nothing for the one still going.
        walls = dict(await table(pg_pool, "SELECT run_id, wall_seconds FROM spend.runs"))
        assert walls["r4"] == 0
        assert walls["r1"] > 0

        live = {
            name: await table(pg_pool, sql)
            for name, sql in (
                ("runs", "SELECT run_id, team, agent_id, agent_revision, model, task_id, flow,"
                 " flow_run_id, origin, day, status, calls, tokens_in, tokens_out, cost_usd"
                 " FROM spend.runs ORDER BY run_id"),
                ("calls", "SELECT * FROM spend.run_calls ORDER BY run_id, call_key"),
                ("ledger", "SELECT * FROM spend.ledger ORDER BY scope, name, period, bucket"),
            )
        }  # fmt: skip
        assert await rebuild(bus, pg_pool, SpendProjection()) > 0
        for name, sql in (
            ("runs", "SELECT run_id, team, agent_id, agent_revision, model, task_id, flow,"
             " flow_run_id, origin, day, status, calls, tokens_in, tokens_out, cost_usd"
             " FROM spend.runs ORDER BY run_id"),
            ("calls", "SELECT * FROM spend.run_calls ORDER BY run_id, call_key"),
            ("ledger", "SELECT * FROM spend.ledger ORDER BY scope, name, period, bucket"),
        ):  # fmt: skip
            assert await table(pg_pool, sql) == live[name], name


async def test_holds_settle_on_their_turn_and_on_the_run_ending(
    bus: Bus, pg_pool: asyncpg.Pool[Any]
) -> None:
    async with projecting(bus, pg_pool) as runner:
        for run_id, turn in (("h1", 1), ("h1", 2), ("h1", 3), ("other", 1)):
            await pg_pool.execute(
                "INSERT INTO spend_live.holds (run_id, turn, scope, name, period, bucket,"
                " cost_usd, tokens) VALUES ($1, $2, 'global', '', 'total', 'total', 1, 10)",
                run_id,
                turn,
            )
        last = await publish_run(
            bus, Run("h1", turns=[(1, 10, 1, 0.5), (2, 10, 1, 0.5)], ends=False)
        )
        await runner.wait_until(RUNS, last)
        holds = await table(pg_pool, "SELECT run_id, turn FROM spend_live.holds ORDER BY 1, 2")
        assert holds == [("h1", 3), ("other", 1)]
        last = await publish(bus, "h1", RunCompleted())
        await runner.wait_until(RUNS, last)
        holds = await table(pg_pool, "SELECT run_id, turn FROM spend_live.holds ORDER BY 1, 2")
        assert holds == [("other", 1)]
