"""The mirror: NEXUS_TASKS, NEXUS_RUNS and NEXUS_FLOWS followed into plane_sync's tables and
outbox (flows: `flowmirror`), and NEXUS_BUDGETS' warnings into the outbox (`budgetreports`).

A projection (`nexus_events.transport.projection`): each batch updates ``tasks``/``runs`` and queues
the writes it implies in the outbox in one transaction with the checkpoint, so a restart neither
loses nor repeats a write; the writer then empties the outbox at Plane's pace. A NOTIFY at
commit wakes the writer.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from nexus_events.contract import subjects
from nexus_events.contract.codec import Decoded
from nexus_events.contract.runstate import TERMINAL_EVENTS, RunEvent
from nexus_events.contract.streams import BUDGETS, FLOWS, RUNS, TASKS
from nexus_events.contract.subjects import NEW_RUN_TOKEN, Family
from nexus_events.events import (
    Event,
    RunPrepared,
    RunRequested,
    TaskCreated,
    TaskDeleted,
    TaskMoved,
    TaskUpdated,
)
from nexus_events.events.budgets import BudgetEvent, BudgetThresholdCrossed
from nexus_events.transport.projection import Conn, Source, quote_ident

from nexus_plane_sync.budgetreports import budget_writes
from nexus_plane_sync.children import child_run_writes
from nexus_plane_sync.decisions import RunState, Write, evolve, run_writes, task_writes
from nexus_plane_sync.flowmirror import apply_flow_event
from nexus_plane_sync.store import OUTBOX_CHANNEL, PLANE_SCHEMA, create_mirror_tables, enqueue

# The run events the mirror reads (heartbeats, logs and tool results are not its business;
# `resuming` is said on the item, `resumed` ends an approval wait the dead attempt left open
# or a sleep, `sleeping` says "sleeping until" on the item).
RUN_EVENTS: tuple[RunEvent, ...] = (
    RunEvent.REQUESTED, RunEvent.PREPARED, RunEvent.STARTED, RunEvent.TURN, RunEvent.TOOL_CALLED,
    RunEvent.APPROVAL_REQUESTED, RunEvent.APPROVAL_DECIDED, RunEvent.CANCEL_REQUESTED,
    RunEvent.RESUMING, RunEvent.RESUMED, RunEvent.SLEEPING, *TERMINAL_EVENTS,
)  # fmt: skip


class PlaneMirror:
    """The projection; `columns` maps run events to board columns, `progress` turns the
    per-run progress comment on, `mirror_tasks` creates work items for Nexus tasks."""

    name = "plane_mirror"

    def __init__(
        self,
        *,
        columns: dict[str, str],
        progress: bool,
        mirror_tasks: bool,
        schema: str = PLANE_SCHEMA,
    ) -> None:
        self.schema = schema
        self.columns = columns
        self.progress = progress
        self.mirror_tasks = mirror_tasks
        self.sources: tuple[Source, ...] = (
            Source(TASKS),
            Source(RUNS, tuple(subjects.run_events_filter(event=e) for e in RUN_EVENTS)),
            Source(FLOWS),
            # A budget ask is not mirrored: it is about a team, agent or global scope as
            # often as a task's, and is answered in chat, the CLI and the console.
            Source(BUDGETS, (subjects.budget_events_filter(event=BudgetEvent.THRESHOLD_CROSSED),)),
        )
        self.queued = 0

    async def create(self, conn: Conn, schema: str) -> None:
        await create_mirror_tables(conn, schema)

    async def apply(self, conn: Conn, schema: str, batch: Sequence[Decoded]) -> None:
        q = quote_ident(schema)
        runs: dict[str, RunState] = {}
        writes: list[tuple[Write, Any]] = []
        for d in batch:
            seq = d.envelope.stream_seq or 0
            at = d.envelope.timestamp
            other = await self._not_a_run(conn, q, d, seq)
            if other is not None:
                writes.extend((w, at) for w in other)
                continue
            run_id = d.address.run_id
            name = d.address.event
            if run_id is None or name is None or run_id == NEW_RUN_TOKEN:
                continue
            run = runs.get(run_id) or await _load_run(conn, q, run_id)
            if isinstance(d.event, RunRequested | RunPrepared):
                await self._identify(conn, q, runs, run, d.event)
            runs[run_id] = evolve(run, d.event, name)
            for w in self._run_writes(d.event, name, run, seq):
                writes.append((w, at))
                if "column" in w.payload:
                    await conn.execute(
                        f"UPDATE {q}.tasks SET col = $2 WHERE task_id = $1",
                        w.task_id, w.payload["column"],
                    )  # fmt: skip
        for run in runs.values():
            await conn.execute(
                f"INSERT INTO {q}.runs (run_id, task_id, agent_id, status, turns, last_tool,"
                " parent_run_id, root_run_id) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)"
                " ON CONFLICT (run_id) DO UPDATE SET"
                " task_id = EXCLUDED.task_id, agent_id = EXCLUDED.agent_id,"
                " status = EXCLUDED.status, turns = EXCLUDED.turns, last_tool = EXCLUDED.last_tool,"
                " parent_run_id = EXCLUDED.parent_run_id, root_run_id = EXCLUDED.root_run_id",
                run.run_id, run.task_id, run.agent_id, run.status, run.turns, run.last_tool,
                run.parent_run_id, run.root_run_id,
            )  # fmt: skip
        queued = 0
        for w, at in writes:
            queued += await enqueue(conn, schema, [w], at)
        if queued:
            await conn.execute(f"NOTIFY {OUTBOX_CHANNEL}")
            self.queued += queued

    async def _not_a_run(self, conn: Conn, q: str, d: Decoded, seq: int) -> list[Write] | None:
        """Fold a task, flow or budget event; its writes (None: a run event, not done here)."""
        family = d.address.family
        if family is Family.TASK:
            task_id = d.address.ids["task_id"]
            await self._task(conn, q, task_id, d)
            return task_writes(d.event, task_id, seq, mirror=self.mirror_tasks)
        if family is Family.FLOW:
            return await apply_flow_event(conn, q, d)
        if family is Family.BUDGET:
            event = d.event
            return budget_writes(event) if isinstance(event, BudgetThresholdCrossed) else []
        return None

    def _run_writes(self, event: Event, name: str, run: RunState, seq: int) -> list[Write]:
        if run.parent_run_id is not None:
            return child_run_writes(event, name, run, seq)
        return run_writes(event, name, run, seq, columns=self.columns, progress=self.progress)

    @staticmethod
    async def _identify(
        conn: Conn, q: str, runs: dict[str, RunState], run: RunState, ev: RunRequested | RunPrepared
    ) -> None:
        """Fill in the run's task and agent, and for a delegated run its parent and the root of
        the parent's chain (the parent's `requested` came earlier in NEXUS_RUNS, so the mirror
        knows it if anyone does; an unknown parent is its own root)."""
        if isinstance(ev, RunPrepared):
            run.task_id = run.task_id or ev.config.task_id
            run.agent_id = run.agent_id or ev.config.agent_id
            return
        run.task_id = run.task_id or ev.task_id
        run.agent_id = run.agent_id or ev.agent_id
        if run.parent_run_id is None and ev.parent_run_id is not None:
            parent = runs.get(ev.parent_run_id) or await _load_run(conn, q, ev.parent_run_id)
            run.parent_run_id = ev.parent_run_id
            run.root_run_id = parent.root_run_id or ev.parent_run_id

    async def _task(self, conn: Conn, q: str, task_id: str, d: Decoded) -> None:
        e = d.event
        if isinstance(e, TaskCreated):
            await conn.execute(
                f"INSERT INTO {q}.tasks (task_id, title, description, col, labels,"
                " external_source, external_id) VALUES ($1, $2, $3, $4, $5::jsonb, $6, $7)"
                " ON CONFLICT (task_id) DO NOTHING",
                task_id, e.title, e.description, e.column.value, json.dumps(e.labels),
                e.external_source, e.external_id,
            )  # fmt: skip
        elif isinstance(e, TaskUpdated):
            await conn.execute(
                f"UPDATE {q}.tasks SET title = coalesce($2, title),"
                " description = coalesce($3, description),"
                " labels = coalesce($4::jsonb, labels) WHERE task_id = $1",
                task_id, e.title, e.description,
                None if e.labels is None else json.dumps(e.labels),
            )  # fmt: skip
        elif isinstance(e, TaskMoved):
            await conn.execute(
                f"UPDATE {q}.tasks SET col = $2 WHERE task_id = $1", task_id, e.column.value
            )
        elif isinstance(e, TaskDeleted):
            await conn.execute(f"UPDATE {q}.tasks SET deleted = true WHERE task_id = $1", task_id)


async def _load_run(conn: Conn, q: str, run_id: str) -> RunState:
    row = await conn.fetchrow(f"SELECT * FROM {q}.runs WHERE run_id = $1", run_id)
    if row is None:
        return RunState(run_id)
    return RunState(
        run_id, row["task_id"], row["agent_id"], row["status"], row["turns"], row["last_tool"],
        row["parent_run_id"], row["root_run_id"],
    )  # fmt: skip
