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
    """Folds NEXUS_FLOWS into flows.flow_runs and flows.flow_steps; remembers each live flow
    run an applied batch changed, with the state it wrote (`take_touched`), so the engine
    decides for those from that state instead of reading it back."""

    name = "flows"
    sources = (Source(FLOWS),)

    def __init__(self, schema: str = SCHEMA) -> None:
        self.schema = schema
        self._touched: dict[str, FlowState] = {}

    def take_touched(self) -> dict[str, FlowState]:
        touched, self._touched = self._touched, {}
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
        first: dict[str, int] = {}
        for d in batch:
            fid = d.address.ids.get("flow_run_id")
            if fid is None or fid == subjects.NEW_RUN_TOKEN:
                continue  # `new` requests are re-published under an id by the engine
            first.setdefault(fid, d.envelope.stream_seq or 0)
        if not first:
            return
        # One read of every flow run the batch names (locked in key order), not one each.
        rows = await conn.fetch(
            f"""SELECT flow_run_id, state FROM {q}.flow_runs WHERE flow_run_id = ANY($1::text[])
                ORDER BY flow_run_id FOR UPDATE""",
            sorted(first),
        )
        before: dict[str, FlowState | None] = dict.fromkeys(first)
        for r in rows:
            before[r["flow_run_id"]] = FlowState.load(r["state"])
        states = dict(before)
        for d in batch:
            fid = d.address.ids.get("flow_run_id")
            if fid in states:
                states[fid] = fold(states[fid], fid, d.event, d.envelope.timestamp)
        changed = {
            fid: state
            for fid, state in states.items()
            if state is not None and state is not before[fid]
        }
        if not changed:
            return
        await _write(conn, q, [(s, first[fid], before[fid]) for fid, s in changed.items()])
        # Taken by the engine after the batch commits (`FlowsRunner` clears what an attempt
        # that did not commit left). Ended flow runs need no decision, and leaving them out
        # bounds what a rebuild (every flow run ever) leaves here to the live ones.
        self._touched.update((fid, s) for fid, s in changed.items() if not s.terminal)


_WRITE_RUN = """INSERT INTO {q}.flow_runs
        (flow_run_id, flow, status, task_id, first_seq, requested_at, updated_at, state)
    VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
    ON CONFLICT (flow_run_id) DO UPDATE SET status = EXCLUDED.status,
        updated_at = EXCLUDED.updated_at, state = EXCLUDED.state"""

_WRITE_STEP = """INSERT INTO {q}.flow_steps (flow_run_id, step, round, item, kind, status,
        run_id, agent_id, reason, approval_id, wait_kind, wait_source, until,
        started_at, finished_at)
    VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15)
    ON CONFLICT (flow_run_id, step, round, item) DO UPDATE SET
        status = EXCLUDED.status, run_id = EXCLUDED.run_id,
        reason = EXCLUDED.reason, approval_id = EXCLUDED.approval_id,
        wait_kind = EXCLUDED.wait_kind, wait_source = EXCLUDED.wait_source,
        until = EXCLUDED.until, finished_at = EXCLUDED.finished_at"""


async def _write(
    conn: Conn, q: str, changed: list[tuple[FlowState, int, FlowState | None]]
) -> None:
    """Upsert the changed flow runs and their changed steps: one pipelined `executemany` per
    table for the whole batch, not a round trip per row."""
    runs = []
    steps = []
    for s, seq, old in changed:
        runs.append(
            (
                s.flow_run_id,
                s.flow,
                s.status.value,
                s.task_id,
                seq,
                s.requested_at,
                s.updated_at,
                json.dumps(s.document(), sort_keys=True),
            )
        )
        old_steps = {} if old is None else old.steps
        for key, rec in s.steps.items():
            if old_steps.get(key) == rec:
                continue
            waiting = rec.waiting
            steps.append(
                (
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
            )
    await conn.executemany(_WRITE_RUN.format(q=q), runs)
    if steps:
        await conn.executemany(_WRITE_STEP.format(q=q), steps)


async def load_state(
    pool: asyncpg.Pool[Any] | Conn, flow_run_id: str, schema: str = SCHEMA
) -> FlowState | None:
    raw = await pool.fetchval(
        f"SELECT state FROM {quote_ident(schema)}.flow_runs WHERE flow_run_id = $1", flow_run_id
    )
    return None if raw is None else FlowState.load(raw)


async def load_states(
    pool: asyncpg.Pool[Any] | Conn, flow_run_ids: Sequence[str], schema: str = SCHEMA
) -> dict[str, FlowState]:
    """The stored states of `flow_run_ids` (those that have one), in one query."""
    rows = await pool.fetch(
        f"SELECT flow_run_id, state FROM {quote_ident(schema)}.flow_runs"
        " WHERE flow_run_id = ANY($1::text[])",
        list(flow_run_ids),
    )
    return {r["flow_run_id"]: FlowState.load(r["state"]) for r in rows}


__all__ = ["NO_ITEM", "SCHEMA", "FlowsProjection", "load_state", "load_states"]
