"""Projection throughput: events/s through ProjectionRunner into PostgreSQL, against raw
pull fetch+ack of the same stream and raw asyncpg executemany of the same rows."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import asyncpg
from nexus_events.contract import subjects
from nexus_events.contract.codec import Decoded
from nexus_events.contract.streams import RUNS, ensure_streams
from nexus_events.events import RunTurn
from nexus_events.transport.bus import Bus, BusSettings, Outgoing
from nexus_events.transport.projection import ProjectionRunner, Source, quote_ident

from bench.baselines import raw_fetch_ack_at

N = 50_000
RUNS_COUNT = 500


class TurnTotals:
    """Tokens per run: one upsert per run per batch, as a real projection would."""

    name = "bench_turns"
    schema = "bench_turns"
    sources = (Source(RUNS, (subjects.run_events_filter(None, "turn"),)),)

    async def create(self, conn: asyncpg.Connection[Any], schema: str) -> None:
        await conn.execute(
            f"CREATE TABLE IF NOT EXISTS {quote_ident(schema)}.totals (run_id text PRIMARY KEY,"
            " turns bigint NOT NULL, tokens bigint NOT NULL)"
        )

    async def apply(
        self, conn: asyncpg.Connection[Any], schema: str, batch: Sequence[Decoded]
    ) -> None:
        totals: dict[str, list[int]] = {}
        for d in batch:
            assert isinstance(d.event, RunTurn)
            t = totals.setdefault(d.address.run_id or "", [0, 0])
            t[0] += 1
            t[1] += d.event.tokens_in + d.event.tokens_out
        await conn.executemany(
            f"INSERT INTO {quote_ident(schema)}.totals VALUES ($1, $2, $3) ON CONFLICT (run_id)"
            " DO UPDATE SET turns = totals.turns + EXCLUDED.turns,"
            " tokens = totals.tokens + EXCLUDED.tokens",
            [(r, t[0], t[1]) for r, t in totals.items()],
        )


async def _raw_executemany(pool: asyncpg.Pool[Any]) -> float:
    await pool.execute(
        "CREATE TABLE raw_totals (run_id text PRIMARY KEY, turns bigint, tokens bigint)"
    )
    rows = [(f"run-{i % RUNS_COUNT}", 1, 100) for i in range(N)]
    t0 = time.perf_counter()
    async with pool.acquire() as conn:
        for start in range(0, N, 500):
            chunk: dict[str, tuple[str, int, int]] = {}
            for r in rows[start : start + 500]:
                chunk[r[0]] = r
            async with conn.transaction():
                await conn.executemany(
                    "INSERT INTO raw_totals VALUES ($1, $2, $3) ON CONFLICT (run_id) DO UPDATE"
                    " SET turns = raw_totals.turns + 1, tokens = raw_totals.tokens + 100",
                    list(chunk.values()),
                )
    return N / (time.perf_counter() - t0)


async def run(nats_url: str, dsn: str) -> list[tuple[str, float, str, float]]:
    bus = await Bus.connect(BusSettings(url=nats_url), source="bench")
    await ensure_streams(bus.js)
    items = [
        Outgoing(
            subjects.run_event(f"run-{i % RUNS_COUNT}", "turn"),
            RunTurn(turn=i + 1, tokens_in=60, tokens_out=40, cost_usd=0.001),
        )
        for i in range(N)
    ]
    acks = await bus.publish_many(items)
    last = acks[-1].seq
    pool = await asyncpg.create_pool(dsn, min_size=1, max_size=4)
    assert pool is not None
    raw_fetch = await raw_fetch_ack_at(nats_url, subjects.run_events_filter(None, "turn"), N)
    raw_sql = await _raw_executemany(pool)
    t0 = time.perf_counter()
    async with ProjectionRunner(bus, pool, TurnTotals(), batch=1000) as runner:
        await runner.wait_until(RUNS, last, within=300)
    rate = N / (time.perf_counter() - t0)
    total = await pool.fetchval('SELECT sum(turns) FROM "bench_turns".totals')
    assert total == N, f"projection applied {total} of {N}"
    await pool.close()
    await bus.close()
    return [
        ("raw fetch+ack of the same events (ev/s)", raw_fetch, "", 1.0),
        ("raw asyncpg batched upsert (rows/s)", raw_sql, "", 1.0),
        ("projection helper end to end (ev/s)", rate, "raw fetch+ack", rate / raw_fetch),
    ]
