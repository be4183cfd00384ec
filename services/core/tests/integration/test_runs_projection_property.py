"""Property test of the agent_runs projection through PostgreSQL: any interleaving, duplication
and redelivery of a run's events, applied in any batches, stores the row (every column) that
the in-order stream stores."""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any

import asyncpg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from nexus_events.contract import subjects
from nexus_events.contract.codec import Decoded, JsMeta, decode, encode
from nexus_events.contract.streams import RUNS

from nexus_core.runs_projection import AgentRunsProjection

from ..run_events import T0, make, stream

IN_ORDER = "prop_runs_in_order"
SHUFFLED = "prop_runs_shuffled"


def stream_of(run_id: str, names: list[str]) -> list[Decoded]:
    """The run's events as core decodes them from NEXUS_RUNS: seq 1..n, rising timestamps."""
    out = []
    for i, name in enumerate(names):
        subject = subjects.run_event(run_id, name)
        enc = encode(subject, make(name, i), source="test")
        at = T0 + timedelta(seconds=i)
        meta = JsMeta(RUNS, i + 1, int(at.timestamp() * 1e9))
        out.append(decode(subject, enc.body, enc.headers, meta))
    return out


@pytest.fixture
async def schemas(pg_pool: asyncpg.Pool[Any]) -> asyncpg.Pool[Any]:
    async with pg_pool.acquire() as conn:
        for schema in (IN_ORDER, SHUFFLED):
            await conn.execute(f"CREATE SCHEMA IF NOT EXISTS {schema}")
            await AgentRunsProjection(schema).create(conn, schema)
    return pg_pool


async def stored(pool: asyncpg.Pool[Any], schema: str, run_id: str) -> dict[str, Any]:
    row = await pool.fetchrow(f"SELECT * FROM {schema}.agent_runs WHERE run_id = $1", run_id)
    assert row is not None
    return dict(row)


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(names=stream, data=st.data())
async def test_any_delivery_stores_the_in_order_row(
    schemas: asyncpg.Pool[Any], names: list[str], data: st.DataObject
) -> None:
    run_id = f"p{uuid.uuid4().hex[:12]}"  # each example its own run: rows never collide
    events = stream_of(run_id, names)
    projection = AgentRunsProjection()
    async with schemas.acquire() as conn, conn.transaction():
        await projection.apply(conn, IN_ORDER, events)

    redelivered = data.draw(st.lists(st.sampled_from(events), max_size=10), label="again")
    shuffled = data.draw(st.permutations(events + redelivered), label="order")
    inner = st.integers(1, len(shuffled) - 1) if len(shuffled) > 1 else st.nothing()
    cuts = sorted(data.draw(st.sets(inner), label="batch boundaries"))
    for start, end in zip([0, *cuts], [*cuts, len(shuffled)], strict=True):
        async with schemas.acquire() as conn, conn.transaction():
            await projection.apply(conn, SHUFFLED, shuffled[start:end])

    assert await stored(schemas, SHUFFLED, run_id) == await stored(schemas, IN_ORDER, run_id)
