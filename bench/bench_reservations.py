"""Spend reservations (nexus_spend.reservations): what holding a model call costs on PostgreSQL.

Three budgets cover every run (global month, team month, agent day), so each reservation
locks three ledger rows, reads the holds, admissions, extensions and asks of its scopes and
writes three holds, in one transaction; the run's scopes are cached after its first call.

(a) latency: 500 calls one at a time (distinct runs and turns), p50 and p99 of
`Reservations.reserve`. Baseline, same run: a bare asyncpg transaction of the same locking
shape (SELECT ... FOR UPDATE of the three ledger rows, INSERT of three holds, commit).
(b) contention: 50 runs of one team reserving 20 calls each at once (all on the same team
and global rows, so every reservation waits for the one before it): reservations/s. Baseline,
same run: the bare transaction under the same concurrency.
(c) what a runner pays per model call: the request on ``nexus.spend.v1.reserve.<run_id>`` to
the spend service's nats.micro endpoint, p50 and p99. Baselines, same run: a raw JetStream KV
update (``put`` of one key, what a compare-and-set ledger would cost per scope) and a bare
NATS request/reply to an endpoint that answers at once.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

import asyncpg
from nats.micro.request import Request
from nexus_events.contract import subjects
from nexus_events.contract.streams import ensure_streams
from nexus_events.events.budgets import BudgetDefinition
from nexus_events.events.spend import SpendDecision, SpendReserve, SpendVerdict
from nexus_events.runtime.clock import ManualClock
from nexus_events.transport import micro
from nexus_events.transport.bus import Bus, BusSettings
from nexus_spend.reservations import Reservations
from nexus_spend.run_endpoints import run_endpoints
from nexus_spend.schema import LIVE_SCHEMA, SCHEMA, create_live_tables, create_projection_tables

Row = tuple[str, float, str, float]

SEQUENTIAL = 500
RUNS = 50
CALLS = 20
AT = datetime(2026, 11, 28, 13, 0, tzinfo=UTC)
KEYS = (
    ("agent", "impl", "day", "2026-11-28"),
    ("global", "", "month", "2026-11"),
    ("team", "alpha", "month", "2026-11"),
)
BUDGETS = (
    {"id": "all", "scope": "global", "period": "month", "limits": {"cost_usd": 1e9}},
    {"id": "alpha", "scope": "team:alpha", "period": "month", "limits": {"cost_usd": 1e9}},
    {"id": "impl", "scope": "agent:impl", "period": "day", "limits": {"tokens": 10**12}},
)


async def _prepare(pool: asyncpg.Pool[Any], runs: int) -> None:
    async with pool.acquire() as conn:
        await conn.execute(f"CREATE SCHEMA IF NOT EXISTS {SCHEMA}")
        await create_projection_tables(conn, SCHEMA)
        await create_live_tables(conn)
        for body in BUDGETS:
            b = BudgetDefinition.model_validate(body)
            await conn.execute(
                f"""INSERT INTO {SCHEMA}.budgets (budget_id, revision, deleted, definition)
                    VALUES ($1, 1, false, $2) ON CONFLICT DO NOTHING""",
                b.id,
                b.model_dump_json(),
            )
        await conn.executemany(
            f"""INSERT INTO {SCHEMA}.runs (run_id, first_seq, team, agent_id, requested_at,
                    model) VALUES ($1, 1, 'alpha', 'impl', now(), 'm') ON CONFLICT DO NOTHING""",
            [(f"run-{i}",) for i in range(runs)],
        )


async def _bare(pool: asyncpg.Pool[Any], run_id: str, turn: int) -> None:
    """The same locking shape without the service: lock, insert, commit."""
    async with pool.acquire() as conn, conn.transaction():
        for scope, name, period, bucket in KEYS:
            await conn.execute(
                f"""SELECT 1 FROM {SCHEMA}.ledger WHERE scope = $1 AND name = $2
                    AND period = $3 AND bucket = $4 FOR UPDATE""",
                scope,
                name,
                period,
                bucket,
            )
        await conn.executemany(
            f"""INSERT INTO {LIVE_SCHEMA}.holds (run_id, turn, scope, name, period, bucket,
                    cost_usd, tokens) VALUES ($1, $2, $3, $4, $5, $6, 0.001, 100)
                ON CONFLICT DO NOTHING""",
            [(f"bare-{run_id}", turn, *key) for key in KEYS],
        )


async def _per_call(bus: Bus, res: Reservations) -> list[Row]:
    """(c): the runner's view, over NATS, beside a KV put and a bare request/reply."""
    service = await micro.start_service(bus.nc, "bench-spend", "bench", run_endpoints(res))
    echo = await micro.start_service(bus.nc, "bench-echo", "bench", [("echo", "bench.echo", _echo)])
    kv = await bus.js.create_key_value(bucket="bench_spend_kv", history=1)
    try:
        body = SpendReserve(turn=1, cost_usd=0.001, tokens=100)
        reserve, put, bare = [], [], []
        for i in range(SEQUENTIAL):
            data = body.model_copy(update={"turn": 3}).model_dump_json().encode()
            t0 = time.perf_counter()
            reply = await bus.nc.request(subjects.spend_reserve(f"run-{i}"), data, timeout=5)
            reserve.append(time.perf_counter() - t0)
            verdict = SpendVerdict.model_validate_json(reply.data)
            assert verdict.decision is SpendDecision.GRANTED, verdict
            t0 = time.perf_counter()
            await kv.put("team.alpha.2026-11", str(i).encode())
            put.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            await bus.nc.request("bench.echo", b"{}", timeout=5)
            bare.append(time.perf_counter() - t0)
    finally:
        await micro.stop_service(service)
        await micro.stop_service(echo)
        await bus.js.delete_key_value("bench_spend_kv")
    rows: list[Row] = []
    for q in (50, 99):
        rows.append(
            (f"reserve over NATS p{q} ms", _p(reserve, q), "KV put", _p(reserve, q) / _p(put, q))
        )
        rows.append((f"  KV put p{q} ms", _p(put, q), "", 0.0))
        rows.append((f"  bare request/reply p{q} ms", _p(bare, q), "", 0.0))
    return rows


async def _echo(request: Request) -> None:
    await request.respond(b"{}")


def _p(samples: list[float], q: int) -> float:
    return statistics.quantiles(samples, n=100)[q - 1] * 1000


async def run(nats_url: str, dsn: str) -> list[Row]:
    bus = await Bus.connect(BusSettings(url=nats_url, name="bench-spend"), source="bench")
    await ensure_streams(bus.js)
    pool = await asyncpg.create_pool(dsn, min_size=4, max_size=10)
    assert pool is not None
    rows: list[Row] = []
    try:
        await _prepare(pool, SEQUENTIAL + RUNS)
        res = Reservations(pool, bus, ManualClock(AT))
        call = SpendReserve(turn=1, cost_usd=0.001, tokens=100)
        await res.reserve("run-0", call)  # the ledger rows exist from here on
        ours, bare = [], []
        for i in range(SEQUENTIAL):
            t0 = time.perf_counter()
            verdict = await res.reserve(f"run-{i}", call.model_copy(update={"turn": 2}))
            ours.append(time.perf_counter() - t0)
            assert verdict.decision is SpendDecision.GRANTED
            t0 = time.perf_counter()
            await _bare(pool, f"run-{i}", 2)
            bare.append(time.perf_counter() - t0)
        rows += [
            (
                "reserve p50 ms (3 budgets)",
                _p(ours, 50),
                "bare transaction",
                _p(ours, 50) / _p(bare, 50),
            ),
            (
                "reserve p99 ms (3 budgets)",
                _p(ours, 99),
                "bare transaction",
                _p(ours, 99) / _p(bare, 99),
            ),
        ]

        async def calls(i: int, fn: Callable[[str, int], Awaitable[None]]) -> None:
            for turn in range(10, 10 + CALLS):
                await fn(f"run-{SEQUENTIAL + i}", turn)

        async def reserve(run_id: str, turn: int) -> None:
            verdict = await res.reserve(run_id, call.model_copy(update={"turn": turn}))
            assert verdict.decision is SpendDecision.GRANTED

        t0 = time.perf_counter()
        await asyncio.gather(*(calls(i, reserve) for i in range(RUNS)))
        ours_rate = RUNS * CALLS / (time.perf_counter() - t0)
        t0 = time.perf_counter()

        async def bare_call(run_id: str, turn: int) -> None:
            await _bare(pool, run_id, turn)

        await asyncio.gather(*(calls(i, bare_call) for i in range(RUNS)))
        bare_rate = RUNS * CALLS / (time.perf_counter() - t0)
        rows.append(
            (
                f"reservations/s, {RUNS} runs on one team",
                ours_rate,
                "bare transaction",
                ours_rate / bare_rate,
            )
        )
        rows += await _per_call(bus, res)
    finally:
        await pool.close()
        await bus.close()
    return rows
