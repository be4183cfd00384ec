"""`decide`: from a flow run's state and its pinned definition, the events still missing.

Pure: the same state, definition and time give the same events, each with a deterministic
message id (``flow:<flow_run_id>:<event>:<step>:<round>:<item>``), so deciding twice (a
restart, two batches touching one flow) publishes nothing twice: JetStream drops a repeat
inside its duplicate window and the idempotent fold ignores one after it. Times in the events
come from the state (when a step started), never from the clock; `now` is not needed by the
decisions themselves and only kept for callers' symmetry with the timer loop.
"""

from __future__ import annotations

from datetime import datetime

from nexus_events.contract import subjects
from nexus_events.contract.runstate import RunEvent
from nexus_events.events import ApprovalDecided, CancelRequested
from nexus_events.events.flows import (
    END,
    STEP_ENDED,
    FlowCancelled,
    FlowCompleted,
    FlowDefinition,
    FlowEscalated,
    FlowEvent,
    FlowFailed,
    FlowReason,
    FlowStepFinished,
    FlowStepStarted,
    GateStep,
    MapStep,
    RunStep,
    StepStatus,
    WaitStep,
    step_run_id,
)
from nexus_events.transport.publish import Outgoing

from nexus_flows.in_progress import gate_step, map_step, wait_step
from nexus_flows.messages import flow_message, terminal_message
from nexus_flows.records import CancelRequest, FlowState, StepRecord
from nexus_flows.rendering import INPUT_LIMIT, Failure, context, evaluate, holds, render


def decide(
    state: FlowState, definition: FlowDefinition, now: datetime | None = None
) -> list[Outgoing]:
    """The events missing for this flow run now (empty: nothing to do until the next event)."""
    del now  # decisions are a function of recorded events only (see the module docstring)
    if state.terminal or state.definition is None:
        return []
    if state.cancel is not None:
        return _cancel(state, state.cancel)
    try:
        return _decide(state, definition)
    except Failure as f:
        return [
            terminal_message(state, FlowFailed(reason=f.reason, message=f.message, step=f.step))
        ]


def _decide(state: FlowState, definition: FlowDefinition) -> list[Outgoing]:  # noqa: PLR0911
    if state.resume is not None:
        step = state.resume
        return _start(state, definition, step, state.rounds.get(step, 0) + 1)
    key = state.current
    if key is None:
        return _start(state, definition, definition.steps[0].id, 1)
    rec = state.steps[key]
    spec = definition.step(rec.step)
    if rec.status in STEP_ENDED:
        return _after(state, definition, rec)
    if isinstance(spec, MapStep):
        return map_step(state, definition, spec, rec)
    if isinstance(spec, GateStep):
        return gate_step(state, definition, spec, rec)
    if isinstance(spec, WaitStep):
        return wait_step(state, definition, spec, rec)
    return []  # a run step: its run's terminal event finishes it (the run bridge)


# -- starting a step -------------------------------------------------------------------


def _start(
    state: FlowState, definition: FlowDefinition, step_id: str, round: int
) -> list[Outgoing]:
    spec = definition.step(step_id)
    fid = state.flow_run_id
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
        return [flow_message(state, started, FlowEvent.STEP_STARTED, step_id, round, None)]
    if isinstance(spec, MapStep):
        items = evaluate(spec.over, ctx, step_id)
        if not isinstance(items, list):
            raise Failure(
                FlowReason.EXPRESSION_ERROR,
                f"step {step_id}: over gave {type(items).__name__}, not a list",
                step_id,
            )
        started = FlowStepStarted(
            step=step_id, round=round, kind="map", agent_id=spec.agent, items=len(items)
        )
        out = [flow_message(state, started, FlowEvent.STEP_STARTED, step_id, round, None)]
        if len(items) > spec.max_items:
            finished = FlowStepFinished(
                step=step_id,
                round=round,
                status=StepStatus.FAILED,
                reason="too_many_items",
                message=f"over gave {len(items)} items, more than max_items {spec.max_items}",
            )
            out.append(flow_message(state, finished, FlowEvent.STEP_FINISHED, step_id, round, None))
        return out
    kind = "gate" if isinstance(spec, GateStep) else "wait"
    run_id = step_run_id(fid, step_id, round) if kind == "gate" else None
    started = FlowStepStarted(step=step_id, round=round, kind=kind, run_id=run_id)
    return [flow_message(state, started, FlowEvent.STEP_STARTED, step_id, round, None)]


def run_input(state: FlowState, definition: FlowDefinition, rec: StepRecord) -> str:
    """The whole input of a step's run. `step_started` carries it cut to INPUT_LIMIT; a
    longer one is rendered again, from the same outputs (nothing else finishes while a step
    runs), so the run request stays the same however often it is made."""
    if len(rec.input) < INPUT_LIMIT:
        return rec.input
    spec = definition.step(rec.step)
    if not isinstance(spec, RunStep | MapStep):
        return rec.input
    ctx = context(state, definition)
    if rec.item is not None and isinstance(spec, MapStep):
        items = evaluate(spec.over, ctx, rec.step)
        index = rec.item
        item = items[index] if isinstance(items, list) and index < len(items) else None
        ctx = context(state, definition, item, index)
    try:
        return render(spec.input, ctx, rec.step)
    except Failure:
        return rec.input


# -- after a step ----------------------------------------------------------------------


def _after(state: FlowState, definition: FlowDefinition, rec: StepRecord) -> list[Outgoing]:
    step = rec.step
    if rec.status != StepStatus.SUCCEEDED:
        reason = rec.reason
        if reason not in (
            FlowReason.INVALID_OUTPUT,
            FlowReason.WAIT_TIMEOUT,
            FlowReason.EXPRESSION_ERROR,
        ):
            reason = FlowReason.STEP_FAILED
        why = f": {rec.message}" if rec.message else ""
        message = f"step {step} (round {rec.round}) {rec.status}, {rec.reason}{why}"
        return [terminal_message(state, FlowFailed(reason=reason, message=message, step=step))]
    spec = definition.step(step)
    ctx = context(state, definition)
    target: str | None = None
    for route in spec.next:
        if route.when is None or holds(route.when, ctx, step):
            target = route.to
            break
    if target is None:
        if isinstance(spec, GateStep) and (rec.output or {}).get("approved") is not True:
            return [
                terminal_message(
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
        completed = FlowCompleted(outputs=dict(state.outputs))
        return [terminal_message(state, completed)]
    return _enter(state, definition, target, rec)


def _enter(
    state: FlowState, definition: FlowDefinition, target: str, came_from: StepRecord
) -> list[Outgoing]:
    spec = definition.step(target)
    round = state.rounds.get(target, 0) + 1
    if spec.max_rounds is not None:
        limit = spec.max_rounds + state.bonus.get(target, 0)
        if round > limit:
            esc = FlowEscalated(
                step=target, round=round, reason=FlowReason.MAX_ROUNDS, to=spec.on_max_rounds
            )
            out = [flow_message(state, esc, FlowEvent.ESCALATED, target, round, None)]
            if spec.on_max_rounds is None:
                failed = FlowFailed(
                    reason=FlowReason.MAX_ROUNDS,
                    message=f"step {target} would run a round {round}, past max_rounds {limit}",
                    step=target,
                )
                return [*out, terminal_message(state, failed)]
            gate = spec.on_max_rounds
            return out + _start(state, definition, gate, state.rounds.get(gate, 0) + 1)
    del came_from
    return _start(state, definition, target, round)


# -- cancel ----------------------------------------------------------------------------


def live_runs(state: FlowState) -> list[str]:
    """Run ids of the flow's runs not finished yet (run steps and map items)."""
    return [
        r.run_id
        for r in state.steps.values()
        if r.run_id and r.kind in ("run", "map") and r.status not in STEP_ENDED
    ]


def _cancel(state: FlowState, cancel: CancelRequest) -> list[Outgoing]:
    out = [
        Outgoing(
            subjects.run_event(run_id, RunEvent.CANCEL_REQUESTED),
            CancelRequested(reason="user_requested", requested_by=cancel.requested_by or "flows"),
            msg_id=f"flow:{run_id}:cancel",
        )
        for run_id in live_runs(state)
    ]
    # A gate still waiting is settled too, so the approval surfaces stop offering it.
    for r in state.steps.values():
        waiting = r.waiting
        if r.kind == "gate" and r.status == StepStatus.WAITING and waiting and waiting.gate_run_id:
            gate_run_id, aid = waiting.gate_run_id, waiting.approval_id or ""
            out.append(
                Outgoing(
                    subjects.run_event(gate_run_id, RunEvent.APPROVAL_DECIDED),
                    ApprovalDecided(
                        approval_id=aid,
                        decision="expired",
                        decided_by=cancel.requested_by,
                        comment="the flow was cancelled",
                        surface="flows",
                    ),
                    msg_id=f"flow:{gate_run_id}:approval_decided:{aid}",
                )
            )
    cancelled = FlowCancelled(
        reason=cancel.reason, message="cancelled on request", cancelled_by=cancel.requested_by
    )
    out.append(terminal_message(state, cancelled))
    return out


__all__ = ["decide", "live_runs", "run_input"]
