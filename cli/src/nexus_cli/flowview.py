"""Flow runs for people: one line per flow event (`nexus flow run --follow`), a flow run's
snapshot (`nexus flow show`) and its short label on the board."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from nexus_events.events.flows import FLOW_TERMINAL, FlowEvent, FlowReason, FlowStatus, StepStatus
from rich.console import Console

from nexus_cli.errors import ExitCode
from nexus_cli.output import table

# The events that end a flow run (each named as the status it leaves, FLOW_TERMINAL) and the
# exit code each gives `nexus flow run --follow`. Keyed by enum, looked up by plain names.
FLOW_ENDS: dict[str, ExitCode] = {
    status: ExitCode.OK if status == FlowStatus.COMPLETED else ExitCode.RUN_FAILED
    for status in FLOW_TERMINAL
}


def _where(body: dict[str, Any]) -> str:
    step = f"step {body.get('step')}"
    if (body.get("round") or 1) > 1:
        step += f" round {body['round']}"
    if body.get("item") is not None:
        step += f" item {body['item']}"
    return step


def _reason(body: dict[str, Any]) -> str:
    reason, text = body.get("reason") or "", body.get("message") or ""
    return f"{reason}: {text}" if reason and text else reason or text


def _started(body: dict[str, Any]) -> str:
    line = f"{_where(body)} started ({body.get('kind')})"
    if body.get("run_id"):
        line += f": run {body['run_id']}"
    if body.get("agent_id"):
        line += f" agent {body['agent_id']}"
    if body.get("items") is not None:
        line += f", {body['items']} items"
    return line


def _finished(body: dict[str, Any]) -> str:
    line = f"{_where(body)} {body.get('status')}"
    output = body.get("output") or {}
    # A typed output's verdict is what the next route reads: show it beside the status.
    if isinstance(output, dict) and output.get("verdict") is not None:
        line += f" verdict {output['verdict']}"
    if body.get("status") != StepStatus.SUCCEEDED and _reason(body):
        line += f" ({_reason(body)})"
    if body.get("run_id"):
        line += f" [run {body['run_id']}]"
    return line


def _waiting(flow_run_id: str, body: dict[str, Any]) -> str:
    kind = body.get("kind")
    until = f" until {body['until']}" if body.get("until") else ""
    if kind == "gate":
        line = f"{_where(body)} waiting for approval {body.get('approval_id')}{until}"
        if body.get("summary"):
            line += f": {body['summary']}"
        return (
            line + f" -> `nexus approve {body.get('gate_run_id')} {body.get('approval_id')}`"
            f" (or `nexus deny ...`)"
        )
    if kind == "event":
        source = f" from {body['source']}" if body.get("source") else ""
        return (
            f"{_where(body)} waiting for event {body.get('correlation_id')}{source}{until}"
            f" -> `nexus flow signal {flow_run_id} {body.get('correlation_id')}`"
        )
    return f"{_where(body)} waiting (timer){until}"


def _requested(body: dict[str, Any]) -> str:
    task = f" for task {body['task_id']}" if body.get("task_id") else ""
    return f"requested flow {body.get('flow')}{task} by {body.get('requested_by') or '?'}"


def _failed(body: dict[str, Any]) -> str:
    at = f" at step {body['step']}" if body.get("step") else ""
    return f"flow failed{at} ({_reason(body)})"


_LINES: dict[str, Callable[[dict[str, Any]], str]] = {
    FlowEvent.REQUESTED: _requested,
    FlowEvent.ACCEPTED: lambda b: f"accepted: flow {b.get('flow')} revision {b.get('revision')}",
    FlowEvent.STEP_STARTED: _started,
    FlowEvent.STEP_FINISHED: _finished,
    FlowEvent.RESUMED: lambda b: (
        f"{_where(b)} resumed: {b.get('by')}"
        + (f" by {b['decided_by']}" if b.get("decided_by") else "")
    ),
    FlowEvent.ESCALATED: lambda b: (
        f"{_where(b)} escalated ({b.get('reason')}) to {b.get('to') or 'nothing'}"
    ),
    FlowEvent.COMPLETED: lambda _: "flow completed",
    FlowEvent.FAILED: _failed,
    FlowEvent.CANCELLED: lambda b: f"flow cancelled ({_reason(b)})",
    FlowEvent.CANCEL_REQUESTED: lambda b: f"cancel requested by {b.get('requested_by') or '?'}",
    FlowEvent.RESUME_REQUESTED: lambda b: f"resume requested by {b.get('requested_by') or '?'}",
    FlowEvent.SIGNAL: lambda b: f"signal {b.get('correlation_id')} from {b.get('sent_by') or '?'}",
}


def describe_flow_event(flow_run_id: str, name: str, body: dict[str, Any]) -> str:
    """One line for one flow event (the body as JSON)."""
    if name == FlowEvent.WAITING:  # the only line that names the flow run (how to answer it)
        return _waiting(flow_run_id, body)
    line = _LINES.get(name)
    return line(body) if line else name


def board_label(flow: dict[str, Any]) -> str:
    """A flow run on the board: ``flow feature: review (waiting)``."""
    step = flow.get("current_step")
    status = flow.get("status") or "?"
    return f"flow {flow.get('flow')}: " + (f"{step} ({status})" if step else status)


def print_flow_run(console: Console, view: dict[str, Any]) -> None:
    """`nexus flow show`: the flow run, then its steps oldest first."""
    revision = f" revision {view['revision']}" if view.get("revision") else ""
    console.print(f"flow run {view['flow_run_id']}  flow {view['flow']}{revision}", markup=False)
    status = view["status"] + (f" ({_reason(view)})" if _reason(view) else "")
    for label, value in (
        ("status", status),
        ("task", view.get("task_id")),
        ("step", view.get("current_step")),
        ("origin", view.get("origin")),
        ("by", view.get("requested_by")),
        ("requested", view.get("requested_at")),
        ("updated", view.get("updated_at")),
    ):
        if value:
            console.print(f"  {label:<10} {value}", markup=False)
    steps = view.get("steps") or []
    if not steps:
        return
    # The run id (what `nexus attach` takes) comes first and never wraps; columns no step
    # fills are left out, and a reason only shows when it says more than the status.
    optional = {
        "ITEM": any(s.get("item") is not None for s in steps),
        "REASON": any(s.get("reason") not in (None, FlowReason.SUCCEEDED) for s in steps),
        "APPROVAL": any(s.get("approval_id") for s in steps),
    }
    columns = [
        c
        for c in ("RUN", "STEP", "KIND", "ROUND", "ITEM", "STATUS", "AGENT", "REASON", "APPROVAL")
        if optional.get(c, True)
    ]
    rows = []
    for s in steps:
        reason = s.get("reason")
        cells = {
            "RUN": s.get("run_id"),
            "STEP": s["step"],
            "KIND": s["kind"],
            "ROUND": s["round"],
            "ITEM": s.get("item"),
            "STATUS": s["status"],
            "AGENT": s.get("agent_id"),
            "REASON": None if reason == FlowReason.SUCCEEDED else reason,
            "APPROVAL": s.get("approval_id"),
        }
        rows.append([cells[c] for c in columns])
    console.print(table(None, columns, rows))
