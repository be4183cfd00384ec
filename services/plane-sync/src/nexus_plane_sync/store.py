"""plane-sync's tables in PostgreSQL (schema ``plane_sync``) and the queries on them.

- ``tasks`` and ``runs``: what the mirror knows of the board (written with its checkpoint).
- ``flows`` and ``flow_gates``: the flow runs of tasks and their gates (also the mirror's):
  which task a flow reports on, who asked, each gate's approvers and whether it is open.
- ``outbox``: writes to make on Plane, in order (``seq``); a pending row with a ``slot``
  absorbs later writes of the same slot (coalescing, ``version`` counts the merges).
- ``objects``: Plane ids of what was written (``item:<task>``, ``comment:<external id>``,
  ``agentrun:<run>``, ``activity:<write id>``), so a write is never made twice.
- ``deliveries``: webhook delivery ids seen (dedupe beyond JetStream's window).
- ``seen_labels``: each work item's labels as last seen, to tell which label a webhook added.
- ``webhook_counts``: webhook deliveries by outcome since the schema was made (what
  `nexus plane status` shows: a restart keeps them); ``deliveries.counted`` marks a delivery
  whose outcome was counted, so a redelivered one is not counted twice.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import asyncpg
from nexus_events.events.flows import FLOW_TERMINAL, FlowStatus
from nexus_events.transport.projection import Conn, quote_ident

from nexus_plane_sync.decisions import ACTIVE_STATUSES, RunState, Write

PLANE_SCHEMA = "plane_sync"
OUTBOX_CHANNEL = "plane_sync_outbox"  # NOTIFY on commit of new writes: the writer wakes
ACTIVE = ACTIVE_STATUSES  # the runs a Plane comment or stop is for
# Flow runs that have not ended (a removed `flow:` label cancels them).
FLOW_ACTIVE = tuple(s.value for s in FlowStatus if s not in FLOW_TERMINAL)


async def create_mirror_tables(conn: Conn, schema: str) -> None:
    q = quote_ident(schema)
    await conn.execute(
        f"""
        CREATE TABLE IF NOT EXISTS {q}.tasks (
            task_id text PRIMARY KEY,
            title text NOT NULL,
            description text NOT NULL DEFAULT '',
            col text NOT NULL DEFAULT 'backlog',
            labels jsonb NOT NULL DEFAULT '[]',
            external_source text,
            external_id text,
            deleted boolean NOT NULL DEFAULT false);
        CREATE INDEX IF NOT EXISTS tasks_external ON {q}.tasks (external_id);
        CREATE TABLE IF NOT EXISTS {q}.runs (
            run_id text PRIMARY KEY,
            task_id text,
            agent_id text,
            status text NOT NULL,
            turns int NOT NULL DEFAULT 0,
            last_tool text);
        CREATE INDEX IF NOT EXISTS runs_task ON {q}.runs (task_id);
        ALTER TABLE {q}.runs ADD COLUMN IF NOT EXISTS parent_run_id text,
            ADD COLUMN IF NOT EXISTS root_run_id text;
        CREATE TABLE IF NOT EXISTS {q}.outbox (
            seq bigserial PRIMARY KEY,
            write_id text NOT NULL UNIQUE,
            op text NOT NULL,
            task_id text NOT NULL,
            run_id text,
            slot text,
            payload jsonb NOT NULL DEFAULT '{{}}',
            coalesced int NOT NULL DEFAULT 0,
            version int NOT NULL DEFAULT 1,
            state text NOT NULL DEFAULT 'pending',
            attempts int NOT NULL DEFAULT 0,
            error text,
            plane_id text,
            first_time timestamptz NOT NULL DEFAULT now(),
            created_at timestamptz NOT NULL DEFAULT now(),
            done_at timestamptz);
        CREATE TABLE IF NOT EXISTS {q}.flows (
            flow_run_id text PRIMARY KEY,
            task_id text,
            flow text,
            requested_by text,
            origin text,
            status text NOT NULL DEFAULT 'requested',
            approvers jsonb NOT NULL DEFAULT '{{}}');
        CREATE INDEX IF NOT EXISTS flows_task ON {q}.flows (task_id);
        CREATE TABLE IF NOT EXISTS {q}.flow_gates (
            gate_run_id text NOT NULL,
            approval_id text NOT NULL,
            flow_run_id text NOT NULL,
            step text NOT NULL,
            open boolean NOT NULL DEFAULT true,
            PRIMARY KEY (gate_run_id, approval_id));
        CREATE INDEX IF NOT EXISTS flow_gates_approval ON {q}.flow_gates (approval_id);
        CREATE UNIQUE INDEX IF NOT EXISTS outbox_slot ON {q}.outbox (slot)
            WHERE state = 'pending' AND slot IS NOT NULL;
        CREATE INDEX IF NOT EXISTS outbox_pending ON {q}.outbox (seq) WHERE state = 'pending';
        """
    )


async def create_service_tables(conn: Conn, schema: str) -> None:
    q = quote_ident(schema)
    await conn.execute(
        f"""
        CREATE SCHEMA IF NOT EXISTS {q};
        CREATE TABLE IF NOT EXISTS {q}.objects (
            key text PRIMARY KEY,
            plane_id text NOT NULL,
            created_at timestamptz NOT NULL DEFAULT now());
        CREATE INDEX IF NOT EXISTS objects_plane ON {q}.objects (plane_id);
        CREATE TABLE IF NOT EXISTS {q}.deliveries (
            delivery_id text PRIMARY KEY,
            received_at timestamptz NOT NULL DEFAULT now());
        CREATE TABLE IF NOT EXISTS {q}.seen_labels (
            work_item_id text PRIMARY KEY,
            labels jsonb NOT NULL DEFAULT '[]');
        CREATE TABLE IF NOT EXISTS {q}.webhook_counts (
            name text PRIMARY KEY,
            n bigint NOT NULL DEFAULT 0);
        ALTER TABLE {q}.deliveries ADD COLUMN IF NOT EXISTS counted boolean NOT NULL
            DEFAULT false;
        """
    )


async def enqueue(conn: Conn, schema: str, writes: list[Write], at: datetime | None) -> int:
    """Queue `writes` (in order); a slotted write merges into its pending slot. Returns how
    many were queued or merged."""
    q = quote_ident(schema)
    n = 0
    for w in writes:
        payload = json.dumps(w.payload)
        if w.slot is not None:
            merged = await conn.fetchval(
                f"UPDATE {q}.outbox SET payload = payload || $2::jsonb,"
                " coalesced = coalesced + 1, version = version + 1"
                " WHERE slot = $1 AND state = 'pending' RETURNING seq",
                w.slot,
                payload,
            )
            if merged is not None:
                n += 1
                continue
        status = await conn.execute(
            f"INSERT INTO {q}.outbox (write_id, op, task_id, run_id, slot, payload, first_time)"
            " VALUES ($1, $2, $3, $4, $5, $6::jsonb, coalesce($7, now()))"
            " ON CONFLICT (write_id) DO NOTHING",
            w.write_id, w.op, w.task_id, w.run_id, w.slot, payload, at,
        )  # fmt: skip
        n += status.endswith(" 1")
    return n


@dataclass(frozen=True)
class FlowGate:
    """A gate of a flow run, as the mirror learnt it from NEXUS_FLOWS: what a ``/approve``
    comment on the flow's work item answers, and who may (`approvers`: the gate's own
    principals from the flow's definition, None = the deployment's default)."""

    flow_run_id: str
    flow: str | None
    gate_run_id: str
    approval_id: str
    step: str
    open: bool
    requested_by: str | None
    origin: str | None
    approvers: tuple[str, ...] | None


@dataclass(frozen=True)
class Pending:
    """An outbox row to execute."""

    seq: int
    write_id: str
    op: str
    task_id: str
    run_id: str | None
    payload: dict[str, Any]
    coalesced: int
    version: int
    attempts: int
    first_time: datetime
    created_at: datetime


class PlaneStore:
    """The queries of the writer, the webhook side and the endpoints."""

    def __init__(self, pool: asyncpg.Pool[Any], schema: str = PLANE_SCHEMA) -> None:
        self.pool = pool
        self.schema = schema
        self.q = quote_ident(schema)

    async def migrate(self) -> None:
        async with self.pool.acquire() as conn, conn.transaction():
            await create_service_tables(conn, self.schema)
            await create_mirror_tables(conn, self.schema)

    # -- outbox ----------------------------------------------------------------------------

    async def pending(self, limit: int = 200) -> list[Pending]:
        rows = await self.pool.fetch(
            f"SELECT seq, write_id, op, task_id, run_id, payload, coalesced, version, attempts,"
            f" first_time, created_at FROM {self.q}.outbox WHERE state = 'pending'"
            " ORDER BY seq LIMIT $1",
            limit,
        )
        return [
            Pending(
                r["seq"],
                r["write_id"],
                r["op"],
                r["task_id"],
                r["run_id"],
                json.loads(r["payload"]),
                r["coalesced"],
                r["version"],
                r["attempts"],
                r["first_time"],
                r["created_at"],
            )
            for r in rows
        ]

    async def attempted(self, seq: int) -> None:
        await self.pool.execute(
            f"UPDATE {self.q}.outbox SET attempts = attempts + 1 WHERE seq = $1", seq
        )

    async def settle(
        self, row: Pending, state: str, *, plane_id: str | None = None, error: str | None = None
    ) -> bool:
        """Mark `row` done or failed unless a merge changed it meanwhile (then it stays
        pending and goes again with the merged content). Returns whether it was settled."""
        status = await self.pool.execute(
            f"UPDATE {self.q}.outbox SET state = $3, plane_id = $4, error = $5, done_at = now()"
            " WHERE seq = $1 AND version = $2",
            row.seq, row.version, state, plane_id, error,
        )  # fmt: skip
        return bool(status.endswith(" 1"))

    async def counts(self) -> dict[str, int]:
        rows = await self.pool.fetch(
            f"SELECT state, count(*) AS n, coalesce(sum(coalesced), 0) AS c"
            f" FROM {self.q}.outbox GROUP BY state"
        )
        out = {r["state"]: int(r["n"]) for r in rows}
        out["coalesced"] = sum(int(r["c"]) for r in rows)
        out["tasks"] = int(await self.pool.fetchval(f"SELECT count(*) FROM {self.q}.tasks"))
        return out

    async def requeue_tasks(self, task_ids: list[str], nonce: str) -> int:
        """Queue a full work item upsert for each live task (all when `task_ids` is empty)."""
        async with self.pool.acquire() as conn, conn.transaction():
            rows = await conn.fetch(
                f"SELECT task_id FROM {self.q}.tasks WHERE NOT deleted"
                " AND (cardinality($1::text[]) = 0 OR task_id = ANY($1::text[]))"
                " AND coalesce(external_source, '') <> 'plane' ORDER BY task_id",
                task_ids,
            )
            writes = [
                Write(
                    f"item:{r['task_id']}:resync:{nonce}",
                    "work_item_upsert",
                    r["task_id"],
                    slot=f"item:{r['task_id']}",
                    payload={"resync": True},
                )
                for r in rows
            ]
            await enqueue(conn, self.schema, writes, None)
            await conn.execute(f"NOTIFY {OUTBOX_CHANNEL}")
        return len(writes)

    async def prune(self, *, done_days: float, delivery_days: float) -> int:
        """Forget settled writes and seen delivery ids older than the given ages (the mirror
        never re-applies old events, and Plane never resends a delivery days later)."""
        done = await self.pool.execute(
            f"DELETE FROM {self.q}.outbox WHERE state <> 'pending'"
            " AND done_at < now() - make_interval(secs => $1)",
            done_days * 86_400,
        )
        seen = await self.pool.execute(
            f"DELETE FROM {self.q}.deliveries"
            " WHERE received_at < now() - make_interval(secs => $1)",
            delivery_days * 86_400,
        )
        return int(done.split()[-1]) + int(seen.split()[-1])

    # -- tasks and runs (read) ---------------------------------------------------------------

    async def task(self, task_id: str) -> asyncpg.Record | None:
        return await self.pool.fetchrow(f"SELECT * FROM {self.q}.tasks WHERE task_id = $1", task_id)

    async def task_of_work_item(self, work_item_id: str) -> str | None:
        """The task a Plane work item mirrors (filed from Plane, or created by us)."""
        value = await self.pool.fetchval(
            f"SELECT task_id FROM {self.q}.tasks WHERE external_source = 'plane'"
            " AND external_id = $1 AND NOT deleted",
            work_item_id,
        )
        if value is None:
            key = await self.pool.fetchval(
                f"SELECT key FROM {self.q}.objects WHERE plane_id = $1 AND key LIKE 'item:%'",
                work_item_id,
            )
            value = key.removeprefix("item:") if key else None
        return None if value is None else str(value)

    async def active_runs(self, task_id: str) -> list[RunState]:
        """The task's active runs, its own (root) runs first: a comment on the work item is
        for the run that works on the task, not for a run it delegated."""
        rows = await self.pool.fetch(
            f"SELECT * FROM {self.q}.runs WHERE task_id = $1 AND status = ANY($2::text[])"
            " ORDER BY parent_run_id IS NOT NULL, run_id",
            task_id,
            list(ACTIVE),
        )
        return [
            RunState(
                r["run_id"], r["task_id"], r["agent_id"], r["status"], r["turns"],
                parent_run_id=r["parent_run_id"], root_run_id=r["root_run_id"],
            )
            for r in rows
        ]  # fmt: skip

    async def flow_gate(self, task_id: str, approval_id: str) -> FlowGate | None:
        """The gate of a flow run of `task_id` whose approval is `approval_id` (open or not:
        a late answer is told who decided), None if no flow of the task has such a gate."""
        row = await self.pool.fetchrow(
            f"SELECT g.gate_run_id, g.approval_id, g.step, g.open, f.flow_run_id, f.flow,"
            f" f.requested_by, f.origin, f.approvers FROM {self.q}.flow_gates g"
            f" JOIN {self.q}.flows f USING (flow_run_id)"
            " WHERE g.approval_id = $1 AND f.task_id = $2 ORDER BY g.open DESC LIMIT 1",
            approval_id,
            task_id,
        )
        if row is None:
            return None
        approvers = json.loads(row["approvers"]) if isinstance(row["approvers"], str) else {}
        named = approvers.get(row["step"])
        return FlowGate(
            row["flow_run_id"], row["flow"], row["gate_run_id"], row["approval_id"], row["step"],
            row["open"], row["requested_by"], row["origin"],
            None if not named else tuple(str(p) for p in named),
        )  # fmt: skip

    async def active_flows(self, task_id: str) -> list[tuple[str, str]]:
        """(flow run id, flow) of the task's flow runs that have not ended."""
        rows = await self.pool.fetch(
            f"SELECT flow_run_id, flow FROM {self.q}.flows WHERE task_id = $1"
            " AND status = ANY($2::text[]) ORDER BY flow_run_id",
            task_id,
            list(FLOW_ACTIVE),
        )
        return [(r["flow_run_id"], r["flow"] or "") for r in rows]

    # -- objects -----------------------------------------------------------------------------

    async def object(self, key: str) -> str | None:
        value = await self.pool.fetchval(
            f"SELECT plane_id FROM {self.q}.objects WHERE key = $1", key
        )
        return None if value is None else str(value)

    async def remember(self, key: str, plane_id: str) -> None:
        await self.pool.execute(
            f"INSERT INTO {self.q}.objects (key, plane_id) VALUES ($1, $2)"
            " ON CONFLICT (key) DO UPDATE SET plane_id = EXCLUDED.plane_id",
            key,
            plane_id,
        )

    async def key_of(self, plane_id: str, prefix: str) -> str | None:
        value = await self.pool.fetchval(
            f"SELECT key FROM {self.q}.objects WHERE plane_id = $1 AND key LIKE $2",
            plane_id,
            prefix + "%",
        )
        return None if value is None else str(value).removeprefix(prefix)

    # -- webhooks ----------------------------------------------------------------------------

    async def first_delivery(self, delivery_id: str) -> bool:
        """Record a delivery id; False if it was seen before."""
        status = await self.pool.execute(
            f"INSERT INTO {self.q}.deliveries (delivery_id) VALUES ($1) ON CONFLICT DO NOTHING",
            delivery_id,
        )
        return bool(status.endswith(" 1"))

    async def forget_delivery(self, delivery_id: str) -> None:
        """Undo `first_delivery` when the delivery could not be filed (Plane may resend)."""
        await self.pool.execute(
            f"DELETE FROM {self.q}.deliveries WHERE delivery_id = $1", delivery_id
        )

    async def count_webhooks(self, counts: dict[str, int], delivery_id: str | None = None) -> bool:
        """Add `counts` to the persisted webhook counters. With `delivery_id`: once per
        delivery (a redelivery after a crash is not counted again; a delivery whose id was
        pruned or never recorded counts). Returns whether they were added."""
        names = [k for k, v in counts.items() if v]
        if not names:
            return False
        add = (
            f"INSERT INTO {self.q}.webhook_counts AS c (name, n)"
            " SELECT * FROM unnest($1::text[], $2::bigint[]) {where}"
            " ON CONFLICT (name) DO UPDATE SET n = c.n + EXCLUDED.n RETURNING 1"
        )
        if delivery_id is None:
            await self.pool.execute(add.format(where=""), names, [counts[k] for k in names])
            return True
        # One statement (one round trip per delivery): mark the delivery counted and add, or
        # add nothing if it was marked already. Every part sees the rows as they were before.
        rows = await self.pool.fetch(
            f"WITH mark AS (UPDATE {self.q}.deliveries SET counted = true"
            "   WHERE delivery_id = $3 AND NOT counted RETURNING 1),"
            f" known AS (SELECT 1 FROM {self.q}.deliveries WHERE delivery_id = $3) "
            + add.format(
                where="WHERE EXISTS (SELECT 1 FROM mark) OR NOT EXISTS (SELECT 1 FROM known)"
            ),
            names, [counts[k] for k in names], delivery_id,
        )  # fmt: skip
        return bool(rows)

    async def webhook_counts(self) -> dict[str, int]:
        rows = await self.pool.fetch(f"SELECT name, n FROM {self.q}.webhook_counts")
        return {r["name"]: int(r["n"]) for r in rows}

    async def swap_labels(self, work_item_id: str, labels: list[str]) -> list[str] | None:
        """Store the labels now seen on a work item; return those seen before (None: new)."""
        async with self.pool.acquire() as conn, conn.transaction():
            before = await conn.fetchval(
                f"SELECT labels FROM {self.q}.seen_labels WHERE work_item_id = $1 FOR UPDATE",
                work_item_id,
            )
            await conn.execute(
                f"INSERT INTO {self.q}.seen_labels (work_item_id, labels) VALUES ($1, $2::jsonb)"
                " ON CONFLICT (work_item_id) DO UPDATE SET labels = EXCLUDED.labels",
                work_item_id,
                json.dumps(sorted(labels)),
            )
        return None if before is None else list(json.loads(before))
