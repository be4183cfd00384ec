"""The flows projection (schema ``flows``): flow_runs (one state document per flow run) and
flow_steps (one row per step, round and map item), folded from NEXUS_FLOWS by
`nexus_events.transport.projection.ProjectionRunner` (rows and checkpoint in one transaction)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import asyncpg
from nexus_events.contract import subjects
from nexus_events.contract.codec import Decoded
from nexus_events.contract.streams import FLOWS
from nexus_events.transport.projection import Conn, Source, quote_ident

from nexus_flows.records import FlowState
from nexus_flows.state import fold

SCHEMA = "flows"
NO_ITEM = -1  # flow_steps.item of a step's own row (a key column cannot be NULL)


class FlowsProjection:
    """Folds NEXUS_FLOWS into flows.flow_runs and flows.flow_steps; remembers which flow
    runs each applied batch touched (`take_touched`) so the engine decides for those."""

    name = "flows"
    sources = (Source(FLOWS),)

    def __init__(self, schema: str = SCHEMA) -> None:
        self.schema = schema
        self._touched: set[str] = set()

    def take_touched(self) -> set[str]:
        touched, self._touched = self._touched, set()
        return touched

    async def create(self, conn: Conn, schema: str) -> None:
        q = quote_ident(schema)
        await conn.execute(
            f"""CREATE TABLE IF NOT EXISTS {q}.flow_runs (
                    flow_run_id text PRIMARY KEY,
                    flow text NOT NULL,
                    status text NOT NULL,
                    task_id text,
                    first_seq bigint NOT NULL,
                    requested_at timestamptz,
                    updated_at timestamptz,
                    state jsonb NOT NULL)"""
        )
        await conn.execute(
            f"CREATE INDEX IF NOT EXISTS flow_runs_status ON {q}.flow_runs (status, first_seq)"
        )
        await conn.execute(
            f"""CREATE TABLE IF NOT EXISTS {q}.flow_steps (
                    flow_run_id text NOT NULL,
                    step text NOT NULL,
                    round int NOT NULL,
                    item int NOT NULL,
                    kind text NOT NULL,
                    status text NOT NULL,
                    run_id text,
                    agent_id text,
                    reason text,
                    approval_id text,
                    wait_kind text,
                    wait_source text,
                    until timestamptz,
                    started_at timestamptz,
                    finished_at timestamptz,
                    PRIMARY KEY (flow_run_id, step, round, item))"""
        )
        await conn.execute(f"CREATE INDEX IF NOT EXISTS flow_steps_run ON {q}.flow_steps (run_id)")
        await conn.execute(
            f"CREATE INDEX IF NOT EXISTS flow_steps_waiting ON {q}.flow_steps (status, until)"
        )

    async def apply(self, conn: Conn, schema: str, batch: Sequence[Decoded]) -> None:
        q = quote_ident(schema)
        states: dict[str, FlowState | None] = {}
        first: dict[str, int] = {}
        before: dict[str, FlowState | None] = {}
        for d in batch:
            fid = d.address.ids.get("flow_run_id")
            if fid is None or fid == subjects.NEW_RUN_TOKEN:
                continue  # `new` requests are re-published under an id by the engine
            if fid not in states:
                raw = await conn.fetchval(
                    f"SELECT state FROM {q}.flow_runs WHERE flow_run_id = $1 FOR UPDATE", fid
                )
                states[fid] = None if raw is None else FlowState.load(raw)
                before[fid] = states[fid]
                first[fid] = d.envelope.stream_seq or 0
            states[fid] = fold(states[fid], fid, d.event, d.envelope.timestamp)
        for fid, state in states.items():
            if state is None or state is before[fid]:
                continue
            await _write(conn, q, state, first[fid], before[fid])
            self._touched.add(fid)


async def _write(conn: Conn, q: str, s: FlowState, seq: int, old: FlowState | None) -> None:
    await conn.execute(
        f"""INSERT INTO {q}.flow_runs
                (flow_run_id, flow, status, task_id, first_seq, requested_at, updated_at, state)
            VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
            ON CONFLICT (flow_run_id) DO UPDATE SET status = EXCLUDED.status,
                updated_at = EXCLUDED.updated_at, state = EXCLUDED.state""",
        s.flow_run_id,
        s.flow,
        s.status.value,
        s.task_id,
        seq,
        s.requested_at,
        s.updated_at,
        json.dumps(s.document(), sort_keys=True),
    )
    old_steps = {} if old is None else old.steps
    for key, rec in s.steps.items():
        if old_steps.get(key) == rec:
            continue
        waiting = rec.waiting
        await conn.execute(
            f"""INSERT INTO {q}.flow_steps (flow_run_id, step, round, item, kind, status,
                    run_id, agent_id, reason, approval_id, wait_kind, wait_source, until,
                    started_at, finished_at)
                VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15)
                ON CONFLICT (flow_run_id, step, round, item) DO UPDATE SET
                    status = EXCLUDED.status, run_id = EXCLUDED.run_id,
                    reason = EXCLUDED.reason, approval_id = EXCLUDED.approval_id,
                    wait_kind = EXCLUDED.wait_kind, wait_source = EXCLUDED.wait_source,
                    until = EXCLUDED.until, finished_at = EXCLUDED.finished_at""",
            s.flow_run_id,
            rec.step,
            rec.round,
            NO_ITEM if rec.item is None else rec.item,
            rec.kind,
            rec.status.value,
            rec.run_id,
            rec.agent_id,
            rec.reason,
            waiting and waiting.approval_id,
            waiting and waiting.kind,
            waiting and waiting.source,
            waiting and waiting.until,
            rec.started_at,
            rec.finished_at,
        )


async def load_state(
    pool: asyncpg.Pool[Any] | Conn, flow_run_id: str, schema: str = SCHEMA
) -> FlowState | None:
    raw = await pool.fetchval(
        f"SELECT state FROM {quote_ident(schema)}.flow_runs WHERE flow_run_id = $1", flow_run_id
    )
    return None if raw is None else FlowState.load(raw)


__all__ = ["NO_ITEM", "SCHEMA", "FlowsProjection", "load_state"]
