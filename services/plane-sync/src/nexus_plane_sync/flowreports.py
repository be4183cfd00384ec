"""What each flow event shows on its task's work item: pure functions from a flow event to
one report (a comment, or an activity of the flow's Plane agent run).

A flow run reports on the work item of its task: a line per step started and finished (the
step, its agent, its verdict or status), a gate's summary with how to answer it (``/approve
<id>`` / ``/deny <id>``), the gate's decision, an escalation, and the flow's end. Each report's
write id names the flow run, the event and the step's (round, item), so a re-applied or a
re-published event queues nothing new.
"""

from __future__ import annotations

from html import escape
from typing import Any

from nexus_events.events import (
    Event,
    FlowCancelled,
    FlowCompleted,
    FlowEscalated,
    FlowFailed,
    FlowResumed,
    FlowStepFinished,
    FlowStepStarted,
    FlowWaiting,
)
from nexus_events.events.flows import StepStatus

from nexus_plane_sync.decisions import Write

# Longest step summary or gate summary quoted in a comment (the rest is in `nexus flow get`).
MAX_TEXT = 2000


def _clip(text: str) -> str:
    return text if len(text) <= MAX_TEXT else text[: MAX_TEXT - 1] + "…"


def _marker(flow_run_id: str) -> str:
    return f"<p><small>nexus flow <code>{escape(flow_run_id)}</code></small></p>"


def _where(step: str, rnd: int, item: int | None) -> str:
    extra = "" if rnd == 1 else f", round {rnd}"
    extra += "" if item is None else f", item {item}"
    return f"{step}{extra}"


def verdict(output: dict[str, Any]) -> str | None:
    """A step's verdict as its typed output says it (``verdict``, else ``decision``)."""
    for key in ("verdict", "decision"):
        value = output.get(key)
        if isinstance(value, str | bool | int) and value != "":
            return str(value)
    return None


Report = tuple[str, dict[str, Any]]
_StepEvent = FlowStepStarted | FlowStepFinished | FlowWaiting | FlowResumed | FlowEscalated


def _line(icon: str, flow: str, text: str) -> str:
    return f"<p>{icon} Flow <strong>{flow}</strong>{text}</p>"


def flow_report(event: Event, name: str, flow: str | None) -> Report | None:
    """(write id suffix, payload) of the report of one flow event; None: nothing to show."""
    label = escape(flow or "flow")
    if isinstance(event, FlowStepStarted | FlowStepFinished):
        return _step(event, name, label)
    if isinstance(event, FlowWaiting):
        return _waiting(event, name, label)
    if isinstance(event, FlowResumed | FlowEscalated):
        return _turn(event, name, label)
    if isinstance(event, FlowCompleted):
        return name, _payload(
            "flow_end", _line("🏁", label, " completed."), "Completed.", "response"
        )
    if isinstance(event, FlowFailed | FlowCancelled):
        verb = "failed" if isinstance(event, FlowFailed) else "was cancelled"
        at = ""
        if isinstance(event, FlowFailed) and event.step:
            at = f" at step <code>{escape(event.step)}</code>"
        detail = f": {escape(_clip(event.message))}" if event.message else ""
        html = _line("❌", label, f" {verb}{at} ({escape(event.reason)}){detail}.")
        body = f"Flow {verb} ({event.reason}) {event.message}".strip()
        return name, _payload("flow_end", html, body, "error")
    return None


def _step(event: FlowStepStarted | FlowStepFinished, name: str, label: str) -> Report:
    where = _where(event.step, event.round, event.item)
    step = f": step <code>{escape(where)}</code>"
    if isinstance(event, FlowStepStarted):
        agent = f" by <strong>{escape(event.agent_id)}</strong>" if event.agent_id else ""
        items = f" over {event.items} item(s)" if event.items is not None else ""
        html = _line("▶️", label, f"{step} started{agent}{items}.")
        return _step_key(name, event), _payload("step", html, f"Step {where} started.", "action")
    said = verdict(event.output)
    outcome = f"verdict <strong>{escape(said)}</strong>" if said else escape(event.status)
    if event.status != StepStatus.SUCCEEDED:
        outcome += f" ({escape(event.reason)})"
    mark = "✅" if event.status == StepStatus.SUCCEEDED else "❌"
    parts = [_line(mark, label, f"{step} finished, {outcome}.")]
    parts += [f"<p>{escape(_clip(t))}</p>" for t in (event.summary, event.message) if t]
    body = f"Step {where} finished: {said or event.status}. {event.summary}".strip()
    return _step_key(name, event), _payload("step", "".join(parts), body, "thought")


def _turn(event: FlowResumed | FlowEscalated, name: str, label: str) -> Report | None:
    step = escape(event.step)
    if isinstance(event, FlowEscalated):
        to = f" to gate <code>{escape(event.to)}</code>" if event.to else ""
        html = _line(
            "⚠️", label, f": step <code>{step}</code> escalated{to} ({escape(event.reason)})."
        )
        return _step_key(name, event), _payload("escalated", html, "Escalated.", "thought")
    if event.by not in ("approved", "denied", "expired"):
        return None  # a timer or an event ended a wait: the next step's start says enough
    who = f" by {escape(event.decided_by)}" if event.decided_by else ""
    note = f": {escape(event.comment)}" if event.comment else ""
    html = _line("🔓", label, f": gate <code>{step}</code> {event.by}{who}{note}.")
    return _step_key(name, event), _payload("gate_decided", html, f"Gate {event.by}.", "thought")


def _waiting(event: FlowWaiting, name: str, label: str) -> Report:
    until = f" (until {event.until:%Y-%m-%d %H:%M} UTC)" if event.until else ""
    step = f"<code>{escape(event.step)}</code>"
    if event.kind != "gate":
        what = "the timer" if event.kind == "timer" else "an event"
        html = _line("⏸", label, f": step {step} waits for {what}{until}.")
        return _step_key(name, event), _payload("waiting", html, "Waiting.", "thought")
    aid = escape(event.approval_id or "?")
    html = (
        _line("✋", label, f" waits at gate {step}{until}:")
        + f"<pre>{escape(_clip(event.summary))}</pre>"
        f"<p>Answer with a comment: <code>/approve {aid}</code> or <code>/deny {aid}</code>"
        " (optionally followed by a note).</p>"
    )
    body = f"{event.summary}\nAnswer /approve {event.approval_id} or /deny {event.approval_id}."
    return _step_key(name, event), _payload("gate", html, body, "elicitation")


def _step_key(name: str, event: _StepEvent) -> str:
    item = "" if event.item is None else f":i{event.item}"
    return f"{name}:{event.step}:r{event.round}{item}"


def _payload(kind: str, html: str, body: str, activity: str) -> dict[str, Any]:
    return {"kind": kind, "html": html, "body": body, "activity": activity}


def flow_writes(
    event: Event, name: str, flow_run_id: str, task_id: str | None, flow: str | None
) -> list[Write]:
    """The report write of one flow event on its task's work item (none without a task)."""
    if task_id is None:
        return []
    found = flow_report(event, name, flow)
    if found is None:
        return []
    suffix, payload = found
    payload["html"] += _marker(flow_run_id)
    write_id = f"flow:{flow_run_id}:{suffix}"
    return [Write(write_id, "run_report", task_id, flow_run_id, None, payload)]
