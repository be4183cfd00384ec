"""What each task and run event asks of Plane: pure functions from an event to writes.

A `Write` is queued in the outbox (`store`), executed by the `writer` and recorded on the
stream as intent and outcome. Its `write_id` is deterministic (derived from the event's stream
sequence or the run's own ids), so applying an event twice queues nothing new; writes with the
same `slot` coalesce while pending (the work item's fields, a run's progress comment): only the
latest content is sent.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from nexus_events.contract.runstate import LIVE, RunEvent, RunStatus, next_status
from nexus_events.events import (
    ApprovalDecided,
    ApprovalRequested,
    Event,
    Reason,
    RunCompleted,
    RunResuming,
    RunSleeping,
    RunStarted,
    TaskCreated,
    TaskDeleted,
    TaskMoved,
    TaskUpdated,
    TerminalEvent,
    ToolCalled,
)
from nexus_events.events import RunTurn as RunTurnEvent

from nexus_plane_sync import render

Op = Literal["work_item_upsert", "work_item_delete", "run_report"]
PLANE_SOURCE = "plane"  # TaskCreated.external_source of tasks filed from Plane work items
# updated_by / moved_by of task changes plane-sync files from Plane: already true there.
FROM_PLANE = "plane:"


@dataclass(frozen=True)
class Write:
    """One change to make on Plane."""

    write_id: str
    op: Op
    task_id: str
    run_id: str | None = None
    slot: str | None = None
    payload: dict[str, Any] = field(default_factory=dict)


@dataclass
class RunState:
    """What the mirror remembers of a run (plane_sync.runs)."""

    run_id: str
    task_id: str | None = None
    agent_id: str | None = None
    status: str = RunStatus.REQUESTED.value
    turns: int = 0
    last_tool: str | None = None
    parent_run_id: str | None = None  # the run that delegated this one (see `children`)
    root_run_id: str | None = None  # the top of its delegation chain: whose item it reports on


def item_slot(task_id: str) -> str:
    return f"item:{task_id}"


def task_writes(event: Event, task_id: str, seq: int, *, mirror: bool) -> list[Write]:
    """Work item writes for a task event: none for tasks filed from Plane (the item is theirs)
    nor for changes that came from Plane (already true there)."""
    if isinstance(event, TaskDeleted):
        return [Write(f"item:{task_id}:delete", "work_item_delete", task_id)]
    payload: dict[str, Any] | None = None
    if isinstance(event, TaskCreated):
        if event.external_source != PLANE_SOURCE and mirror:
            payload = {}
    elif isinstance(event, TaskUpdated) and not _from_plane(event):
        payload = {}
        if event.title is not None:
            payload["name"] = event.title
        if event.description is not None:
            payload["description"] = event.description
        if event.labels is not None:
            payload["labels"] = list(event.labels)
    elif isinstance(event, TaskMoved) and not _from_plane(event):
        payload = {"column": event.column.value}
    if payload is None:
        return []
    write_id = f"item:{task_id}:{seq}"
    return [Write(write_id, "work_item_upsert", task_id, slot=item_slot(task_id), payload=payload)]


def _from_plane(event: TaskUpdated | TaskMoved) -> bool:
    who = event.updated_by if isinstance(event, TaskUpdated) else event.moved_by
    return bool(who and who.startswith(FROM_PLANE))


def run_writes(
    event: Event,
    name: str,
    run: RunState,
    seq: int,
    *,
    columns: dict[str, str],
    progress: bool,
) -> list[Write]:
    """The run's reports on its task's work item, and the item's move, for one run event.

    `run` is the state after the event. Runs without a task have no work item: nothing.
    """
    task = run.task_id
    if task is None:
        return []
    rid = run.run_id
    writes: list[Write] = []
    report: dict[str, Any] | None = None
    write_id = f"run:{rid}:{name}"
    slot = None
    if isinstance(event, RunStarted):
        report = {
            "kind": "started", "html": render.started(rid, run.agent_id),
            "activity": "thought", "body": f"{run.agent_id or 'The agent'} started.",
        }  # fmt: skip
    elif isinstance(event, RunTurnEvent | ToolCalled) and progress:
        report = {
            "kind": "progress", "external_id": f"run:{rid}:progress",
            "html": render.progress(rid, run.turns, run.last_tool, "working"),
        }  # fmt: skip
        write_id, slot = f"run:{rid}:progress:{seq}", f"progress:{rid}"
    elif isinstance(event, ApprovalRequested):
        write_id = f"run:{rid}:approval:{event.approval_id}"
        report = {
            "kind": "approval", "activity": "elicitation",
            "html": render.approval(rid, event.approval_id, event.tool, event.summary, event.why),
            "body": f"Approve {event.tool}? {event.summary}\nAnswer /approve"
            f" {event.approval_id} or /deny {event.approval_id}.",
        }  # fmt: skip
    elif isinstance(event, RunSleeping):
        # One line per sleep: a sleep ends its attempt, so the attempt names it.
        write_id = f"run:{rid}:sleeping:{event.attempt}"
        until = render.wake_time(event.until)
        report = {
            "kind": RunEvent.SLEEPING.value, "activity": "thought",
            "html": render.sleeping(rid, event.until, event.reason),
            "body": f"Sleeping until {until}" + (f": {event.reason}" if event.reason else "."),
        }  # fmt: skip
    elif isinstance(event, RunResuming) and event.reason == Reason.WOKE:
        write_id = f"run:{rid}:resuming:{event.attempt}"
        cause = event.wake.cause.value if event.wake is not None else "wake"
        report = {
            "kind": "woke", "activity": "thought",
            "html": render.woke(rid, event.attempt, cause, event.wake.text if event.wake else ""),
            "body": f"Woke ({cause}): attempt {event.attempt}.",
        }  # fmt: skip
    elif isinstance(event, RunResuming):
        # One comment per attempt: its id names the attempt, so a redelivered or re-published
        # `resuming` of the same attempt queues nothing new.
        write_id = f"run:{rid}:resuming:{event.attempt}"
        report = {
            "kind": "resumed", "activity": "thought",
            "html": render.resumed(rid, event.attempt, event.reason, event.message),
            "body": f"Resumed after runner loss (attempt {event.attempt}).",
        }  # fmt: skip
    elif isinstance(event, RunCompleted):
        outcome = event.result.model_dump(mode="json", exclude_none=True)
        report = {
            "kind": "result", "html": render.result(rid, outcome), "activity": "response",
            "body": event.result.summary or "Completed.",
        }  # fmt: skip
    elif isinstance(event, TerminalEvent):
        report = {
            "kind": "ended", "activity": "error",
            "html": render.ended(rid, event.status, event.reason, event.message),
            "body": f"{event.status} ({event.reason}) {event.message}".strip(),
        }  # fmt: skip
    elif isinstance(event, ApprovalDecided):
        report = None  # the decision came from a person; the move below says enough
    if report is not None:
        writes.append(Write(write_id, "run_report", task, rid, slot, report))
    column = columns.get(name)
    if column is not None:
        writes.append(
            Write(
                f"item:{task}:run:{rid}:{seq}",
                "work_item_upsert",
                task,
                slot=item_slot(task),
                payload={"column": column},
            )
        )
    return writes


def evolve(run: RunState, event: Event, name: str) -> RunState:
    """The run's state after `event`: its status as `nexus_events.contract.runstate` moves it
    (terminal states final, never backwards), its turns and last tool from the event."""
    if isinstance(event, RunTurnEvent):
        run.turns = max(run.turns, event.turn)
    elif isinstance(event, ToolCalled):
        run.last_tool = event.tool
    current = _stored_status(run.status)
    new = next_status(current, name) or current  # `or`: a legacy status is rewritten as known
    if new is not None:
        run.status = new.value
    return run


def _stored_status(status: str) -> RunStatus | None:
    """A status from plane_sync.runs as runstate knows it; a status of an older mirror that
    runstate does not know is mapped, never raised on (that would stop the projection)."""
    known = _STATUSES.get(status)
    return known if known is not None else _LEGACY_STATUS.get(status)


_STATUSES = {s.value: s for s in RunStatus}
# Statuses plane-sync wrote before it used runstate, still in the rows of existing deployments:
# `cancelling` was a live run asked to stop; how far it had got was not kept, so it reads as
# running (live, so a Plane comment or stop still finds it; its ending comes next anyway).
_LEGACY_STATUS = {"cancelling": RunStatus.RUNNING}
# The runs a Plane comment or stop is for (`store.active_runs`): those that have not ended.
ACTIVE_STATUSES: tuple[str, ...] = (*sorted(s.value for s in LIVE), *_LEGACY_STATUS)
