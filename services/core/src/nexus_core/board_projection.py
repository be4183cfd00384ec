"""The `board` projection: one row per task, from NEXUS_TASKS + NEXUS_RUNS (schema core_board).

The two streams are followed by separate loops, so their events interleave differently on every
replay. To give the same rows whatever the interleaving, each stream writes only its own
columns: task events set the task's fields and the `manual_column` an operator chose (with its
JetStream time), run events set the current run and the `run_column` its status implies (with
the time of that status). The board column is a generated column: whichever of the two is
more recent (the run's on a tie). A cancelled run implies no column, so the task falls back to
where the operator put it.

A run delegated by another (`RunRequested.parent_run_id`) works on its parent's task but is
not the task's own run: it is kept in `run_index` with its parent and agent, and never becomes
the task's current run nor moves its column (a reviewer child finishing must not send the task
to review while its parent still works). Whether a run is a child is fixed by its first event,
`requested`, which comes first in NEXUS_RUNS; so this too is the same on any interleaving.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import asyncpg
from nexus_events.contract import subjects
from nexus_events.contract.codec import Decoded
from nexus_events.contract.runstate import RunStatus, next_status
from nexus_events.contract.streams import RUNS, TASKS
from nexus_events.contract.subjects import Family
from nexus_events.events import (
    Column,
    Event,
    RunPrepared,
    RunRequested,
    TaskCreated,
    TaskDeleted,
    TaskMoved,
    TaskUpdated,
)
from nexus_events.transport.projection import Source, quote_ident

from nexus_core.migrations import Conn, migrate
from nexus_core.tracing import TASK_ID, spans_for

BOARD_SCHEMA = "core_board"

MIGRATIONS = (
    """
    CREATE TABLE {schema}.tasks (
        task_id text PRIMARY KEY,
        title text,
        description text NOT NULL DEFAULT '',
        labels jsonb NOT NULL DEFAULT '[]',
        repo jsonb,
        external_id text,
        external_source text,
        created_at timestamptz,
        updated_at timestamptz,
        deleted boolean NOT NULL DEFAULT false,
        manual_column text,
        manual_at timestamptz,
        current_run_id text,
        current_run_at timestamptz,
        run_column text,
        run_at timestamptz,
        runs jsonb NOT NULL DEFAULT '[]',
        board_column text GENERATED ALWAYS AS (
            CASE WHEN run_column IS NOT NULL AND (manual_at IS NULL OR run_at >= manual_at)
                 THEN run_column ELSE COALESCE(manual_column, 'backlog') END) STORED);
    CREATE INDEX ON {schema}.tasks (board_column);
    CREATE TABLE {schema}.run_index (
        run_id text PRIMARY KEY,
        task_id text NOT NULL,
        status text NOT NULL,
        requested_at timestamptz);
    """,
    # Delegation: a child run's parent and agent (children are listed under their task).
    """
    ALTER TABLE {schema}.run_index ADD COLUMN parent_run_id text, ADD COLUMN agent_id text;
    CREATE INDEX ON {schema}.run_index (task_id) WHERE parent_run_id IS NOT NULL;
    """,
    # Spend (docs/spend.md): the team a task's runs count against, read at assembly.
    """
    ALTER TABLE {schema}.tasks ADD COLUMN team text;
    """,
)

# The board column a run's status puts its task in; None: the status says nothing (cancelled).
STATUS_COLUMN: dict[RunStatus, Column | None] = {
    RunStatus.REQUESTED: Column.IN_PROGRESS,
    RunStatus.PREPARED: Column.IN_PROGRESS,
    RunStatus.QUEUED: Column.IN_PROGRESS,
    RunStatus.DISPATCHED: Column.IN_PROGRESS,
    RunStatus.RUNNING: Column.IN_PROGRESS,
    RunStatus.AWAITING_APPROVAL: Column.AWAITING_APPROVAL,
    RunStatus.COMPLETED: Column.REVIEW,
    RunStatus.FAILED: Column.FAILED,
    RunStatus.TIMED_OUT: Column.FAILED,
    RunStatus.LOST: Column.FAILED,
    RunStatus.CANCELLED: None,
}


@dataclass
class _RunRef:
    task_id: str
    status: str
    requested_at: datetime | None
    parent_run_id: str | None = None
    agent_id: str | None = None
    dirty: bool = False


@dataclass
class _TaskRuns:
    current_run_id: str | None = None
    current_run_at: datetime | None = None
    run_column: str | None = None
    run_at: datetime | None = None
    runs: list[str] = field(default_factory=list)


def _iso(at: datetime | None) -> str | None:
    return None if at is None else at.isoformat()


def _later_or_equal(a: datetime | None, b: datetime | None) -> bool:
    return b is None or (a is not None and a >= b)


def evolve_task_runs(
    task: _TaskRuns, run_id: str, status: RunStatus, at: datetime | None, *, new_run: bool
) -> None:
    """Fold a run's new status into its task's run fields (in place)."""
    if new_run and run_id not in task.runs:
        task.runs.append(run_id)
    if new_run and (task.current_run_id is None or _later_or_equal(at, task.current_run_at)):
        task.current_run_id, task.current_run_at = run_id, at
    if task.current_run_id == run_id:
        column = STATUS_COLUMN[status]
        task.run_column = None if column is None else column.value
        task.run_at = at


def _task_of(ev: Event) -> str | None:
    """The task a run event names (only `requested` and `prepared` do)."""
    # Exact types: isinstance on pydantic models goes through ABCMeta, and this runs per event.
    if type(ev) is RunRequested:
        return ev.task_id
    if type(ev) is RunPrepared:
        return ev.config.task_id
    return None


def _run_of(ev: Event) -> tuple[str | None, str | None]:
    """The agent and the delegating run a run's first event names (parent: `requested` only)."""
    if type(ev) is RunRequested:
        return ev.agent_id, ev.parent_run_id
    if type(ev) is RunPrepared:
        return ev.config.agent_id, None
    return None, None


class BoardProjection:
    name = "board"
    sources: tuple[Source, ...] = (Source(TASKS), Source(RUNS))

    def __init__(self, schema: str = BOARD_SCHEMA) -> None:
        self.schema = schema

    async def create(self, conn: Conn, schema: str) -> None:
        await migrate(conn, schema, MIGRATIONS)

    async def apply(self, conn: Conn, schema: str, batch: Sequence[Decoded]) -> None:
        q = quote_ident(schema)
        if batch and batch[0].address.family is Family.TASK:
            spans = spans_for("core project board")
            for d in batch:
                with spans(d, {TASK_ID: d.address.ids.get("task_id", "")}):
                    await self._apply_task(conn, q, d)
        else:
            await self._apply_runs(conn, q, batch)

    async def _apply_task(self, conn: Conn, q: str, d: Decoded) -> None:
        task_id = d.address.ids.get("task_id", "")
        at, ev = d.envelope.timestamp, d.event
        if isinstance(ev, TaskCreated):
            await conn.execute(
                f"INSERT INTO {q}.tasks (task_id, title, description, labels, repo, external_id,"
                " external_source, created_at, updated_at, manual_column, manual_at, deleted,"
                " team)"
                " VALUES ($1, $2, $3, $4::jsonb, $5::jsonb, $6, $7, $8, $8, $9, $8, false, $10)"
                " ON CONFLICT (task_id) DO UPDATE SET title = EXCLUDED.title,"
                " description = EXCLUDED.description, labels = EXCLUDED.labels,"
                " repo = EXCLUDED.repo, external_id = EXCLUDED.external_id,"
                " external_source = EXCLUDED.external_source, created_at = EXCLUDED.created_at,"
                " updated_at = EXCLUDED.updated_at, manual_column = EXCLUDED.manual_column,"
                " manual_at = EXCLUDED.manual_at, deleted = false, team = EXCLUDED.team",
                task_id, ev.title, ev.description, json.dumps(ev.labels),
                None if ev.repo is None else ev.repo.model_dump_json(exclude_none=True),
                ev.external_id, ev.external_source, at, ev.column.value, ev.team,
            )  # fmt: skip
        elif isinstance(ev, TaskUpdated):
            await conn.execute(
                f"INSERT INTO {q}.tasks (task_id, title, description, labels, repo, updated_at,"
                " team)"
                " VALUES ($1, $2, COALESCE($3, ''), COALESCE($4::jsonb, '[]'), $5::jsonb, $6,"
                " $7)"
                " ON CONFLICT (task_id) DO UPDATE SET"
                " title = COALESCE(EXCLUDED.title, tasks.title),"
                " description = COALESCE($3, tasks.description),"
                " labels = COALESCE($4::jsonb, tasks.labels),"
                " repo = COALESCE($5::jsonb, tasks.repo), updated_at = EXCLUDED.updated_at,"
                " team = COALESCE($7, tasks.team)",
                task_id, ev.title, ev.description,
                None if ev.labels is None else json.dumps(ev.labels),
                None if ev.repo is None else ev.repo.model_dump_json(exclude_none=True), at,
                ev.team,
            )  # fmt: skip
        elif isinstance(ev, TaskMoved):
            await conn.execute(
                f"INSERT INTO {q}.tasks (task_id, manual_column, manual_at, updated_at)"
                " VALUES ($1, $2, $3, $3) ON CONFLICT (task_id) DO UPDATE SET"
                " manual_column = EXCLUDED.manual_column, manual_at = EXCLUDED.manual_at,"
                " updated_at = EXCLUDED.updated_at",
                task_id,
                ev.column.value,
                at,
            )
        elif isinstance(ev, TaskDeleted):
            await conn.execute(
                f"INSERT INTO {q}.tasks (task_id, deleted, updated_at) VALUES ($1, true, $2)"
                " ON CONFLICT (task_id) DO UPDATE SET deleted = true, updated_at = $2",
                task_id,
                at,
            )

    async def _apply_runs(self, conn: Conn, q: str, batch: Sequence[Decoded]) -> None:
        run_ids = sorted(
            {
                d.address.run_id
                for d in batch
                if d.address.run_id not in (None, subjects.NEW_RUN_TOKEN)
            }
        )
        refs: dict[str, _RunRef] = {
            r["run_id"]: _RunRef(
                r["task_id"], r["status"], r["requested_at"], r["parent_run_id"], r["agent_id"]
            )
            for r in await conn.fetch(
                f"SELECT run_id, task_id, status, requested_at, parent_run_id, agent_id"
                f" FROM {q}.run_index WHERE run_id = ANY($1::text[])",
                run_ids,
            )
        }
        task_ids = {ref.task_id for ref in refs.values()}
        for d in batch:
            task_id = _task_of(d.event)
            if task_id:
                task_ids.add(task_id)
        tasks: dict[str, _TaskRuns] = {
            r["task_id"]: _TaskRuns(r["current_run_id"], r["current_run_at"], r["run_column"],
                                    r["run_at"], json.loads(r["runs"]))
            for r in await conn.fetch(
                f"SELECT task_id, current_run_id, current_run_at, run_column, run_at, runs"
                f" FROM {q}.tasks WHERE task_id = ANY($1::text[])",
                sorted(task_ids),
            )
        }  # fmt: skip
        touched: set[str] = set()
        spans = spans_for("core project board")
        for d in batch:
            with spans(d) as span:
                task_id = self._fold_run(d, refs, tasks)
                if task_id is not None:
                    touched.add(task_id)
                if span is not None:
                    span.set_attribute(TASK_ID, task_id or "")
        # Each write is one statement over a JSON array of rows (not executemany: one
        # execution per row on the server).
        dirty = sorted((rid, ref) for rid, ref in refs.items() if ref.dirty)
        if dirty:
            await conn.execute(
                f"INSERT INTO {q}.run_index (run_id, task_id, status, requested_at,"
                " parent_run_id, agent_id) SELECT * FROM jsonb_to_recordset($1::jsonb)"
                " AS r(run_id text, task_id text, status text, requested_at timestamptz,"
                " parent_run_id text, agent_id text)"
                " ON CONFLICT (run_id) DO UPDATE SET status = EXCLUDED.status",
                json.dumps(
                    [
                        {"run_id": rid, "task_id": ref.task_id, "status": ref.status,
                         "requested_at": _iso(ref.requested_at),
                         "parent_run_id": ref.parent_run_id, "agent_id": ref.agent_id}
                        for rid, ref in dirty
                    ]
                ),
            )  # fmt: skip
        if touched:
            await conn.execute(
                f"INSERT INTO {q}.tasks (task_id, current_run_id, current_run_at, run_column,"
                " run_at, runs) SELECT * FROM jsonb_to_recordset($1::jsonb) AS r(task_id text,"
                " current_run_id text, current_run_at timestamptz, run_column text,"
                " run_at timestamptz, runs jsonb)"
                " ON CONFLICT (task_id) DO UPDATE SET current_run_id = EXCLUDED.current_run_id,"
                " current_run_at = EXCLUDED.current_run_at, run_column = EXCLUDED.run_column,"
                " run_at = EXCLUDED.run_at, runs = EXCLUDED.runs",
                json.dumps(
                    [
                        {"task_id": tid, "current_run_id": t.current_run_id,
                         "current_run_at": _iso(t.current_run_at), "run_column": t.run_column,
                         "run_at": _iso(t.run_at), "runs": t.runs}
                        for tid in sorted(touched)
                        for t in (tasks[tid],)
                    ]
                ),
            )  # fmt: skip

    @staticmethod
    def _fold_run(d: Decoded, refs: dict[str, _RunRef], tasks: dict[str, _TaskRuns]) -> str | None:
        """Fold one run event into the run index and its task; the task touched, if any."""
        run_id, name = d.address.run_id, d.address.event
        if run_id is None or name is None or run_id == subjects.NEW_RUN_TOKEN:
            return None
        at, ev = d.envelope.timestamp, d.event
        ref = refs.get(run_id)
        new_run = False
        if ref is None:
            task_id = _task_of(ev)
            if task_id is None:
                return None  # a run without a task (or whose request we never saw)
            status = next_status(None, name)
            if status is None:
                return None
            agent_id, parent_run_id = _run_of(ev)
            ref = refs[run_id] = _RunRef(
                task_id, status.value, at, parent_run_id, agent_id, dirty=True
            )
            new_run = True
        else:
            status = next_status(ref.status, name)
            if status is None:
                return None
            ref.status, ref.dirty = status.value, True
        if ref.parent_run_id is not None:
            return None  # a delegated child: listed under the task, never its current run
        task = tasks.setdefault(ref.task_id, _TaskRuns())
        evolve_task_runs(task, run_id, status, at, new_run=new_run)
        return ref.task_id


async def task_team(
    pool: asyncpg.Pool[Any], task_id: str, schema: str = BOARD_SCHEMA
) -> str | None:
    """The team a task names (docs/spend.md), None for none or an unknown/deleted task."""
    team: str | None = await pool.fetchval(
        f"SELECT team FROM {quote_ident(schema)}.tasks WHERE task_id = $1 AND NOT deleted",
        task_id,
    )
    return team
