"""`decide`: from a flow run's state and its pinned definition, the events still missing.

Pure: the same state, definition and time give the same events, each with a deterministic
message id (``flow:<flow_run_id>:<event>:<step>:<round>:<item>``), so deciding twice (a
restart, two batches touching one flow) publishes nothing twice: JetStream drops a repeat
inside its duplicate window and the idempotent fold ignores one after it. Times in the events
come from the state (when a step started), never from the clock; `now` is not needed by the
decisions themselves and only kept for callers' symmetry with the timer loop.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import lru_cache
from typing import Any

from nexus_events import subjects
from nexus_events.events import ApprovalDecided, ApprovalRequested, CancelRequested, Event
from nexus_events.events.flows import (
    END,
    FlowCancelled,
    FlowCompleted,
    FlowDefinition,
    FlowEscalated,
    FlowFailed,
    FlowReason,
    FlowResumed,
    FlowStepFinished,
    FlowStepStarted,
    FlowWaiting,
    GateStep,
    MapStep,
    Quorum,
    RunStep,
    WaitStep,
    step_run_id,
)
from nexus_events.expressions import ExpressionError, compile_expression, compile_template
from nexus_events.publish import Outgoing

from nexus_flows.state import RUNNING, STEP_DONE, WAITING, Record, State, is_terminal, step_key

INPUT_LIMIT = 4_000  # a step_started's rendered input is cut to this (the contract's bound)
GATE_TOOL = "flow_gate"


@dataclass(frozen=True)
class Failure(Exception):  # noqa: N818 - a decision, raised to unwind the step being decided
    reason: str
    message: str
    step: str | None


@lru_cache(maxsize=1024)
def _expr(text: str) -> Any:
    return compile_expression(text)


@lru_cache(maxsize=1024)
def _tmpl(text: str) -> Any:
    return compile_template(text)


def msg_id(flow_run_id: str, event: str, step: str, round: int, item: int | None) -> str:
    return f"flow:{flow_run_id}:{event}:{step}:{round}:{'-' if item is None else item}"


def terminal_msg_id(state: State, event: str) -> str:
    # A resumed flow may fail (or complete) again: each resume is its own attempt.
    return f"flow:{state['flow_run_id']}:{event}:{state['resumes']}"


def context(
    state: State, definition: FlowDefinition, item: Any = None, index: int | None = None
) -> dict[str, Any]:
    """What conditions and templates see (the flows.py module docstring describes it)."""
    repo = state.get("repo") or (
        definition.repo.model_dump(mode="json") if definition.repo else None
    )
    ctx: dict[str, Any] = {}
    steps: dict[str, Any] = {}
    for step in definition.steps:
        ctx[step.id] = state["outputs"].get(step.id) or {}
        steps[step.id] = state["last"].get(step.id) or {}
    # The built-in names come last: they win over a step that took one of their names.
    ctx.update(
        {
            "task": {
                "id": state.get("task_id") or "",
                "input": state.get("input") or "",
                "repo": (repo or {}).get("url") or "",
            },
            "input": state.get("input") or "",
            "flow": {
                "id": state["flow"],
                "run_id": state["flow_run_id"],
                "revision": state.get("revision") or 0,
            },
            "steps": steps,
        }
    )
    if index is not None:
        ctx["item"] = item
        ctx["index"] = index
    return ctx


def render(template: str, ctx: dict[str, Any], step: str) -> str:
    try:
        return str(_tmpl(template).render(ctx))
    except ExpressionError as exc:
        raise Failure(FlowReason.EXPRESSION_ERROR, f"step {step}: {exc}", step) from None


def _test(text: str, ctx: dict[str, Any], step: str) -> bool:
    try:
        return bool(_expr(text).test(ctx))
    except ExpressionError as exc:
        raise Failure(FlowReason.EXPRESSION_ERROR, f"step {step}: {exc}", step) from None


def _evaluate(text: str, ctx: dict[str, Any], step: str) -> Any:
    try:
        return _expr(text).evaluate(ctx)
    except ExpressionError as exc:
        raise Failure(FlowReason.EXPRESSION_ERROR, f"step {step}: {exc}", step) from None


def _flow(  # noqa: PLR0917 - the message id's parts, in order
    state: State, event: Event, name: str, step: str, round: int, item: int | None
) -> Outgoing:
    fid = state["flow_run_id"]
    return Outgoing(
        subjects.flow_event(fid, event.event_name),
        event,
        msg_id=msg_id(fid, name, step, round, item),
    )


def _terminal(state: State, event: Event) -> Outgoing:
    fid = state["flow_run_id"]
    return Outgoing(
        subjects.flow_event(fid, event.event_name),
        event,
        msg_id=terminal_msg_id(state, event.event_name),
    )


def _at(value: str | None) -> datetime:
    assert value is not None
    return datetime.fromisoformat(value)


def decide(state: State, definition: FlowDefinition, now: datetime | None = None) -> list[Outgoing]:
    """The events missing for this flow run now (empty: nothing to do until the next event)."""
    del now  # decisions are a function of recorded events only (see the module docstring)
    if is_terminal(state) or state["definition"] is None:
        return []
    if state["cancel"] is not None:
        return _cancel(state)
    try:
        return _decide(state, definition)
    except Failure as f:
        return [_terminal(state, FlowFailed(reason=f.reason, message=f.message, step=f.step))]


def _decide(state: State, definition: FlowDefinition) -> list[Outgoing]:  # noqa: PLR0911
    if state["resume"] is not None:
        step = state["resume"]
        return _start(state, definition, step, state["rounds"].get(step, 0) + 1)
    key = state["current"]
    if key is None:
        return _start(state, definition, definition.steps[0].id, 1)
    rec = state["steps"][key]
    spec = definition.step(rec["step"])
    if rec["status"] in STEP_DONE:
        return _after(state, definition, rec)
    if isinstance(spec, MapStep):
        return _map(state, definition, spec, rec)
    if isinstance(spec, GateStep):
        return _gate(state, definition, spec, rec)
    if isinstance(spec, WaitStep):
        return _wait(state, definition, spec, rec)
    return []  # a run step: its run's terminal event finishes it (the run bridge)


# -- starting a step -------------------------------------------------------------------


def _start(state: State, definition: FlowDefinition, step_id: str, round: int) -> list[Outgoing]:
    spec = definition.step(step_id)
    fid = state["flow_run_id"]
    ctx = context(state, definition)
    if isinstance(spec, RunStep):
        started = FlowStepStarted(
            step=step_id,
            round=round,
            kind="run",
            run_id=step_run_id(fid, step_id, round),
            agent_id=spec.agent,
            input=render(spec.input, ctx, step_id)[:INPUT_LIMIT],
        )
        return [_flow(state, started, "step_started", step_id, round, None)]
    if isinstance(spec, MapStep):
        items = _evaluate(spec.over, ctx, step_id)
        if not isinstance(items, list):
            raise Failure(
                FlowReason.EXPRESSION_ERROR,
                f"step {step_id}: over gave {type(items).__name__}, not a list",
                step_id,
            )
        started = FlowStepStarted(
            step=step_id, round=round, kind="map", agent_id=spec.agent, items=len(items)
        )
        out = [_flow(state, started, "step_started", step_id, round, None)]
        if len(items) > spec.max_items:
            finished = FlowStepFinished(
                step=step_id,
                round=round,
                status="failed",
                reason="too_many_items",
                message=f"over gave {len(items)} items, more than max_items {spec.max_items}",
            )
            out.append(_flow(state, finished, "step_finished", step_id, round, None))
        return out
    kind = "gate" if isinstance(spec, GateStep) else "wait"
    run_id = step_run_id(fid, step_id, round) if kind == "gate" else None
    started = FlowStepStarted(step=step_id, round=round, kind=kind, run_id=run_id)
    return [_flow(state, started, "step_started", step_id, round, None)]


def run_input(state: State, definition: FlowDefinition, rec: Record) -> str:
    """The whole input of a step's run. `step_started` carries it cut to INPUT_LIMIT; a
    longer one is rendered again, from the same outputs (nothing else finishes while a step
    runs), so the run request stays the same however often it is made."""
    if len(rec["input"]) < INPUT_LIMIT:
        return str(rec["input"])
    spec = definition.step(rec["step"])
    if not isinstance(spec, RunStep | MapStep):
        return str(rec["input"])
    ctx = context(state, definition)
    if rec["item"] is not None and isinstance(spec, MapStep):
        items = _evaluate(spec.over, ctx, rec["step"])
        index = int(rec["item"])
        item = items[index] if isinstance(items, list) and index < len(items) else None
        ctx = context(state, definition, item, index)
    try:
        return render(spec.input, ctx, rec["step"])
    except Failure:
        return str(rec["input"])


# -- a step in progress ----------------------------------------------------------------


def _children(state: State, rec: Record) -> list[Record]:
    prefix = f"{rec['step']}/{rec['round']}/"
    kids = [r for k, r in state["steps"].items() if k.startswith(prefix) and r["item"] is not None]
    return sorted(kids, key=lambda r: int(r["item"]))


def _needed(spec: MapStep, n: int) -> int:
    if isinstance(spec.join, Quorum):
        return spec.join.quorum
    return n if spec.join == "all" else 1


def _map(state: State, definition: FlowDefinition, spec: MapStep, rec: Record) -> list[Outgoing]:
    step, round = rec["step"], rec["round"]
    n = int(rec["items"] or 0)
    kids = _children(state, rec)
    ok = sum(1 for r in kids if r["status"] == "succeeded")
    bad = sum(1 for r in kids if r["status"] in ("failed", "cancelled"))
    live = [r for r in kids if r["status"] not in STEP_DONE]
    need = _needed(spec, n)
    if ok >= need or n - bad < need:
        status = "succeeded" if ok >= need else "failed"
        outputs: list[Any] = [None] * n
        for r in kids:
            outputs[int(r["item"])] = r["output"] if r["status"] == "succeeded" else None
        out = [_cancel_run(state, r["run_id"]) for r in live if r["run_id"]]
        finished = FlowStepFinished(
            step=step,
            round=round,
            status=status,
            reason=FlowReason.SUCCEEDED if status == "succeeded" else FlowReason.STEP_FAILED,
            message="" if status == "succeeded" else f"{ok} of {n} items succeeded, {need} needed",
            output={"items": outputs, "succeeded": ok, "failed": bad},
        )
        out.append(_flow(state, finished, "step_finished", step, round, None))
        return out
    free = spec.concurrency - len(live)
    if free <= 0 or len(kids) >= n:
        return []
    items = _evaluate(spec.over, context(state, definition), step)
    out = []
    fid = state["flow_run_id"]
    for index in range(len(kids), min(n, len(kids) + free)):
        item = items[index] if isinstance(items, list) and index < len(items) else None
        ctx = context(state, definition, item, index)
        started = FlowStepStarted(
            step=step,
            round=round,
            item=index,
            kind="map",
            run_id=step_run_id(fid, step, round, index),
            agent_id=spec.agent,
            input=render(spec.input, ctx, step)[:INPUT_LIMIT],
        )
        out.append(_flow(state, started, "step_started", step, round, index))
    return out


def approval_id(step: str, round: int) -> str:
    return f"gate-{step}-r{round}"


def _gate(state: State, definition: FlowDefinition, spec: GateStep, rec: Record) -> list[Outgoing]:
    step, round = rec["step"], rec["round"]
    if rec["waiting"] is None:
        until = _at(rec["started_at"]) + timedelta(seconds=spec.expires_in)
        summary = render(spec.summary, context(state, definition), step)
        gate_run_id = rec["run_id"] or step_run_id(state["flow_run_id"], step, round)
        aid = approval_id(step, round)
        waiting = FlowWaiting(
            step=step,
            round=round,
            kind="gate",
            until=until,
            summary=summary,
            approval_id=aid,
            gate_run_id=gate_run_id,
        )
        asked = ApprovalRequested(
            approval_id=aid,
            tool=GATE_TOOL,
            summary=summary,
            why=spec.description or f"flow {state['flow']} gate {step}",
            expires_at=until,
        )
        return [
            _flow(state, waiting, "waiting", step, round, None),
            Outgoing(
                subjects.run_event(gate_run_id, ApprovalRequested),
                asked,
                msg_id=f"flow:{gate_run_id}:approval_requested:{aid}",
            ),
        ]
    resumed = rec["resumed"]
    if resumed is None:
        return []
    approved = resumed["by"] == "approved" or (
        resumed["by"] == "expired" and spec.default == "approved"
    )
    finished = FlowStepFinished(
        step=step,
        round=round,
        status="succeeded",
        run_id=rec["run_id"],
        output={
            "approved": approved,
            "decided_by": resumed["decided_by"],
            "comment": resumed["comment"],
        },
    )
    return [_flow(state, finished, "step_finished", step, round, None)]


def _wait(state: State, definition: FlowDefinition, spec: WaitStep, rec: Record) -> list[Outgoing]:
    step, round = rec["step"], rec["round"]
    started = _at(rec["started_at"])
    if rec["waiting"] is None:
        if spec.timer is not None:
            waiting = FlowWaiting(
                step=step, round=round, kind="timer", until=started + timedelta(seconds=spec.timer)
            )
        else:
            assert spec.event is not None
            waiting = FlowWaiting(
                step=step,
                round=round,
                kind="event",
                until=None if spec.timeout is None else started + timedelta(seconds=spec.timeout),
                correlation_id=render(spec.event.correlation, context(state, definition), step),
                source=spec.event.source,
            )
        return [_flow(state, waiting, "waiting", step, round, None)]
    resumed = rec["resumed"]
    if resumed is None:
        if rec["status"] == WAITING and rec["signal"] is not None:
            signal = rec["signal"]
            event = FlowResumed(step=step, round=round, by="event", payload=signal["payload"])
            return [_flow(state, event, "resumed", step, round, None)]
        return []
    if resumed["by"] == "timeout":
        finished = FlowStepFinished(
            step=step,
            round=round,
            status="failed",
            reason=FlowReason.WAIT_TIMEOUT,
            message=f"no matching event within {spec.timeout}s",
            output={"by": "timeout", "payload": None},
        )
    else:
        finished = FlowStepFinished(
            step=step,
            round=round,
            status="succeeded",
            output={"by": resumed["by"], "payload": resumed["payload"]},
        )
    return [_flow(state, finished, "step_finished", step, round, None)]


# -- after a step ----------------------------------------------------------------------


def _after(state: State, definition: FlowDefinition, rec: Record) -> list[Outgoing]:
    step = rec["step"]
    if rec["status"] != "succeeded":
        reason = rec["reason"]
        if reason not in (
            FlowReason.INVALID_OUTPUT,
            FlowReason.WAIT_TIMEOUT,
            FlowReason.EXPRESSION_ERROR,
        ):
            reason = FlowReason.STEP_FAILED
        why = f": {rec['message']}" if rec["message"] else ""
        message = f"step {step} (round {rec['round']}) {rec['status']}, {rec['reason']}{why}"
        return [_terminal(state, FlowFailed(reason=reason, message=message, step=step))]
    spec = definition.step(step)
    ctx = context(state, definition)
    target: str | None = None
    for route in spec.next:
        if route.when is None or _test(route.when, ctx, step):
            target = route.to
            break
    if target is None:
        if isinstance(spec, GateStep) and (rec["output"] or {}).get("approved") is not True:
            return [
                _terminal(
                    state,
                    FlowFailed(
                        reason=FlowReason.GATE_DENIED,
                        message=f"gate {step} denied",
                        step=step,
                    ),
                )
            ]
        ids = [s.id for s in definition.steps]
        at = ids.index(step)
        target = ids[at + 1] if at + 1 < len(ids) else END
    if target == END:
        completed = FlowCompleted(outputs=dict(state["outputs"]))
        return [_terminal(state, completed)]
    return _enter(state, definition, target, rec)


def _enter(
    state: State, definition: FlowDefinition, target: str, came_from: Record
) -> list[Outgoing]:
    spec = definition.step(target)
    round = state["rounds"].get(target, 0) + 1
    if spec.max_rounds is not None:
        limit = spec.max_rounds + state["bonus"].get(target, 0)
        if round > limit:
            esc = FlowEscalated(
                step=target, round=round, reason=FlowReason.MAX_ROUNDS, to=spec.on_max_rounds
            )
            out = [_flow(state, esc, "escalated", target, round, None)]
            if spec.on_max_rounds is None:
                failed = FlowFailed(
                    reason=FlowReason.MAX_ROUNDS,
                    message=f"step {target} would run a round {round}, past max_rounds {limit}",
                    step=target,
                )
                return [*out, _terminal(state, failed)]
            gate = spec.on_max_rounds
            return out + _start(state, definition, gate, state["rounds"].get(gate, 0) + 1)
    del came_from
    return _start(state, definition, target, round)


# -- cancel ----------------------------------------------------------------------------


def live_runs(state: State) -> list[str]:
    """Run ids of the flow's runs not finished yet (run steps and map items)."""
    return [
        r["run_id"]
        for r in state["steps"].values()
        if r["run_id"] and r["kind"] in ("run", "map") and r["status"] in (RUNNING, WAITING)
    ]


def _cancel_run(state: State, run_id: str) -> Outgoing:
    return Outgoing(
        subjects.run_event(run_id, CancelRequested),
        CancelRequested(reason="flow_step_not_needed", requested_by=f"flow:{state['flow_run_id']}"),
        msg_id=f"flow:{run_id}:cancel",
    )


def _cancel(state: State) -> list[Outgoing]:
    cancel = state["cancel"]
    out = [
        Outgoing(
            subjects.run_event(run_id, CancelRequested),
            CancelRequested(
                reason="user_requested", requested_by=cancel["requested_by"] or "flows"
            ),
            msg_id=f"flow:{run_id}:cancel",
        )
        for run_id in live_runs(state)
    ]
    # A gate still waiting is settled too, so the approval surfaces stop offering it.
    for r in state["steps"].values():
        waiting = r["waiting"] or {}
        if r["kind"] == "gate" and r["status"] == WAITING and waiting.get("gate_run_id"):
            gate_run_id, aid = waiting["gate_run_id"], waiting["approval_id"]
            out.append(
                Outgoing(
                    subjects.run_event(gate_run_id, ApprovalDecided),
                    ApprovalDecided(
                        approval_id=aid,
                        decision="expired",
                        decided_by=cancel["requested_by"],
                        comment="the flow was cancelled",
                        surface="flows",
                    ),
                    msg_id=f"flow:{gate_run_id}:approval_decided:{aid}",
                )
            )
    cancelled = FlowCancelled(
        reason=cancel["reason"], message="cancelled on request", cancelled_by=cancel["requested_by"]
    )
    out.append(_terminal(state, cancelled))
    return out


__all__ = ["Failure", "approval_id", "context", "decide", "live_runs", "msg_id", "step_key"]
