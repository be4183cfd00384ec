"""What a delegated child run asks of Plane: reports on its parent's work item, no moves.

A child run (`RunRequested.parent_run_id`, started by the channel gateway for a `delegate`
tool call) works on its parent's task, so it reports on the same work item. It is shown as the
parent's delegation: a line when it is asked for, its approvals (a person must still answer
them), and its result or failure; its start, progress and column changes are the parent's
business, so a reviewer finishing never moves the item to Done while the parent works. With
Plane's native agent runs its reports are activities of the root run's Plane agent run
(``agent_run_of`` in the payload), not a Plane agent run of their own.
"""

from __future__ import annotations

from nexus_events.events import ApprovalRequested, Event, RunCompleted, RunRequested, TerminalEvent

from nexus_plane_sync import render
from nexus_plane_sync.decisions import RunState, Write, run_writes


def child_run_writes(event: Event, name: str, run: RunState, seq: int) -> list[Write]:
    """The writes of one event of the child run `run` (its state after the event)."""
    task, rid, parent = run.task_id, run.run_id, run.parent_run_id
    if task is None or parent is None:
        return []
    agent = run.agent_id or "the delegated agent"
    report: dict[str, object] | None = None
    if isinstance(event, RunRequested):
        report = {
            "kind": "delegated", "html": render.delegated(rid, run.agent_id, parent),
            "activity": "action", "body": f"Delegated to {agent} (run {rid}).",
        }  # fmt: skip
    elif isinstance(event, RunCompleted):
        outcome = event.result.model_dump(mode="json", exclude_none=True)
        report = {
            "kind": "result", "html": render.child_result(rid, run.agent_id, outcome),
            "activity": "response",
            "body": f"{agent} (run {rid}): {event.result.summary or 'Completed.'}",
        }  # fmt: skip
    elif isinstance(event, TerminalEvent):
        report = {
            "kind": "ended", "activity": "error",
            "html": render.child_ended(rid, run.agent_id, event.status, event.reason,
                                       event.message),
            "body": f"{agent} (run {rid}) {event.status} ({event.reason}) {event.message}".strip(),
        }  # fmt: skip
    elif isinstance(event, ApprovalRequested):
        # The same question as a root run's; no column: the parent's run decides those.
        writes = run_writes(event, name, run, seq, columns={}, progress=False)
        return [_under_root(w, run) for w in writes]
    if report is None:
        return []
    return [_under_root(Write(f"run:{rid}:{name}", "run_report", task, rid, None, report), run)]


def _under_root(write: Write, run: RunState) -> Write:
    payload = {**write.payload, "agent_run_of": run.root_run_id or run.parent_run_id}
    return Write(write.write_id, write.op, write.task_id, write.run_id, write.slot, payload)
