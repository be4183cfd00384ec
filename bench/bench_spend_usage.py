"""The usage query at a million runs (nexus.spend.v1.usage over the spend projection's `runs`).

A million runs (200 agents, 20 teams, 8 models, a year of days, most in a flow) are copied
into a fresh `spend.runs`, analysed, then each report is asked five times through the spend
service's own SQL (`nexus_spend.usage_sql`: the grouped rows and the total) and the median
printed. Baseline, same run: a bare `SELECT count(*)` over the same table (the full scan every
unfiltered report pays at least).
"""

from __future__ import annotations

import random
import statistics
import time
from datetime import UTC, date, datetime, timedelta
from typing import Any

import asyncpg
from nexus_events.events.spend import UsageGroup, UsageQuery
from nexus_spend.schema import create_projection_tables
from nexus_spend.usage_sql import grouped, total

Row = tuple[str, float, str, float]

RUNS = 1_000_000
SCHEMA = "spend_bench_usage"
REPEATS = 5
START = date(2025, 12, 1)
REPORTS: tuple[tuple[str, UsageQuery], ...] = (
    ("by agent, all time", UsageQuery(by=UsageGroup.AGENT)),
    ("by team, all time", UsageQuery(by=UsageGroup.TEAM)),
    ("by day, all time", UsageQuery(by=UsageGroup.DAY, limit=1000)),
    ("by model, one team", UsageQuery(by=UsageGroup.MODEL, team="team-7")),
    (
        "by agent, one team, last 30 days",
        UsageQuery(
            by=UsageGroup.AGENT,
            team="team-7",
            since=datetime.combine(START + timedelta(days=335), datetime.min.time(), UTC),
        ),
    ),
)


def _rows(n: int) -> list[tuple[Any, ...]]:
    rng = random.Random(40)
    out = []
    for i in range(n):
        day = START + timedelta(days=rng.randrange(365))
        at = datetime.combine(day, datetime.min.time(), UTC) + timedelta(
            seconds=rng.randrange(86400)
        )
        flow_run = f"fr-{i // 4}" if i % 3 else None
        tokens_in, tokens_out = rng.randrange(1000, 90000), rng.randrange(100, 9000)
        out.append(
            (
                f"run-{i}", i + 1, f"team-{i % 20}", f"agent-{i % 200}", 1 + i % 5,
                f"model-{i % 8}", f"task-{i // 3}", "feature" if flow_run else None, flow_run,
                "cli", at, day, "completed", at + timedelta(minutes=5), at, 300.0,
                rng.randrange(1, 40), tokens_in, tokens_out,
                (tokens_in * 2.5 + tokens_out * 10) / 1e6,
            )
        )  # fmt: skip
    return out


COLUMNS = (
    "run_id", "first_seq", "team", "agent_id", "agent_revision", "model", "task_id", "flow",
    "flow_run_id", "origin", "requested_at", "day", "status", "ended_at", "started_at",
    "wall_seconds", "calls", "tokens_in", "tokens_out", "cost_usd",
)  # fmt: skip


async def _median(conn: asyncpg.Connection[Any], sql: str, args: list[Any]) -> float:
    times = []
    for _ in range(REPEATS):
        t0 = time.perf_counter()
        await conn.fetch(sql, *args)
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1000


async def run(dsn: str) -> list[Row]:
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute(f"DROP SCHEMA IF EXISTS {SCHEMA} CASCADE")
        await conn.execute(f"CREATE SCHEMA {SCHEMA}")
        await create_projection_tables(conn, SCHEMA)
        t0 = time.perf_counter()
        await conn.copy_records_to_table(
            "runs", schema_name=SCHEMA, records=_rows(RUNS), columns=COLUMNS
        )
        await conn.execute(f"ANALYZE {SCHEMA}.runs")
        loaded = time.perf_counter() - t0
        scan = await _median(conn, f"SELECT count(*) FROM {SCHEMA}.runs", [])
        rows: list[Row] = [(f"load {RUNS:,} runs (s)", loaded, "", 0.0)]
        for name, query in REPORTS:
            sql, args = grouped(SCHEMA, query)
            whole, total_args = total(SCHEMA, query)
            ms = await _median(conn, sql, args) + await _median(conn, whole, total_args)
            rows.append((f"usage {name} (ms, rows + total)", ms, "count(*) scan", ms / scan))
        rows.append(("  count(*) over the table (ms)", scan, "", 0.0))
        await conn.execute(f"DROP SCHEMA {SCHEMA} CASCADE")
        return rows
    finally:
        await conn.close()
