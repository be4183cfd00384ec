"""Decisions for a step in progress: a map step's item runs and join, a gate's approval
request and answer, a wait's end (timer, signal or timeout)."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from nexus_events.contract import subjects
from nexus_events.contract.runstate import RunEvent
from nexus_events.events import ApprovalRequested
from nexus_events.events.flows import (
    STEP_ENDED,
    FlowDefinition,
    FlowEvent,
    FlowReason,
    FlowResumed,
    FlowStepFinished,
    FlowStepStarted,
    FlowWaiting,
    GateStep,
    MapStep,
    Quorum,
    StepStatus,
    WaitStep,
    step_run_id,
)
from nexus_events.transport.publish import Outgoing

from nexus_flows.messages import cancel_run, flow_message
from nexus_flows.records import FlowState, StepRecord
from nexus_flows.rendering import INPUT_LIMIT, context, evaluate, render

GATE_TOOL = "flow_gate"


def _at(value: datetime | None) -> datetime:
    assert value is not None
    return value


def _children(state: FlowState, rec: StepRecord) -> list[StepRecord]:
    prefix = f"{rec.step}/{rec.round}/"
    kids = [r for k, r in state.steps.items() if k.startswith(prefix) and r.item is not None]
    return sorted(kids, key=lambda r: r.item or 0)


def _needed(spec: MapStep, n: int) -> int:
    if isinstance(spec.join, Quorum):
        return spec.join.quorum
    return n if spec.join == "all" else 1


def map_step(
    state: FlowState, definition: FlowDefinition, spec: MapStep, rec: StepRecord
) -> list[Outgoing]:
    step, round = rec.step, rec.round
    n = rec.items or 0
    kids = _children(state, rec)
    ok = sum(1 for r in kids if r.status == StepStatus.SUCCEEDED)
    bad = sum(1 for r in kids if r.status in (StepStatus.FAILED, StepStatus.CANCELLED))
    live = [r for r in kids if r.status not in STEP_ENDED]
    need = _needed(spec, n)
    if ok >= need or n - bad < need:
        succeeded = ok >= need
        outputs: list[Any] = [None] * n
        for r in kids:
            outputs[r.item or 0] = r.output if r.status == StepStatus.SUCCEEDED else None
        out = [cancel_run(state, r.run_id) for r in live if r.run_id]
        finished = FlowStepFinished(
            step=step,
            round=round,
            status=StepStatus.SUCCEEDED if succeeded else StepStatus.FAILED,
            reason=FlowReason.SUCCEEDED if succeeded else FlowReason.STEP_FAILED,
            message="" if succeeded else f"{ok} of {n} items succeeded, {need} needed",
            output={"items": outputs, "succeeded": ok, "failed": bad},
        )
        out.append(flow_message(state, finished, FlowEvent.STEP_FINISHED, step, round, None))
        return out
    free = spec.concurrency - len(live)
    if free <= 0 or len(kids) >= n:
        return []
    items = evaluate(spec.over, context(state, definition), step)
    out = []
    fid = state.flow_run_id
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
        out.append(flow_message(state, started, FlowEvent.STEP_STARTED, step, round, index))
    return out


def approval_id(step: str, round: int) -> str:
    return f"gate-{step}-r{round}"


def gate_step(
    state: FlowState, definition: FlowDefinition, spec: GateStep, rec: StepRecord
) -> list[Outgoing]:
    step, round = rec.step, rec.round
    if rec.waiting is None:
        until = _at(rec.started_at) + timedelta(seconds=spec.expires_in)
        summary = render(spec.summary, context(state, definition), step)
        gate_run_id = rec.run_id or step_run_id(state.flow_run_id, step, round)
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
            why=spec.description or f"flow {state.flow} gate {step}",
            expires_at=until,
        )
        return [
            flow_message(state, waiting, FlowEvent.WAITING, step, round, None),
            Outgoing(
                subjects.run_event(gate_run_id, RunEvent.APPROVAL_REQUESTED),
                asked,
                msg_id=f"flow:{gate_run_id}:approval_requested:{aid}",
            ),
        ]
    resumed = rec.resumed
    if resumed is None:
        return []
    approved = resumed.by == "approved" or (resumed.by == "expired" and spec.default == "approved")
    finished = FlowStepFinished(
        step=step,
        round=round,
        status=StepStatus.SUCCEEDED,
        run_id=rec.run_id,
        output={
            "approved": approved,
            "decided_by": resumed.decided_by,
            "comment": resumed.comment,
        },
    )
    return [flow_message(state, finished, FlowEvent.STEP_FINISHED, step, round, None)]


def wait_step(
    state: FlowState, definition: FlowDefinition, spec: WaitStep, rec: StepRecord
) -> list[Outgoing]:
    step, round = rec.step, rec.round
    started = _at(rec.started_at)
    if rec.waiting is None:
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
        return [flow_message(state, waiting, FlowEvent.WAITING, step, round, None)]
    resumed = rec.resumed
    if resumed is None:
        if rec.status == StepStatus.WAITING and rec.signal is not None:
            event = FlowResumed(step=step, round=round, by="event", payload=rec.signal.payload)
            return [flow_message(state, event, FlowEvent.RESUMED, step, round, None)]
        return []
    if resumed.by == "timeout":
        finished = FlowStepFinished(
            step=step,
            round=round,
            status=StepStatus.FAILED,
            reason=FlowReason.WAIT_TIMEOUT,
            message=f"no matching event within {spec.timeout}s",
            output={"by": "timeout", "payload": None},
        )
    else:
        finished = FlowStepFinished(
            step=step,
            round=round,
            status=StepStatus.SUCCEEDED,
            output={"by": resumed.by, "payload": resumed.payload},
        )
    return [flow_message(state, finished, FlowEvent.STEP_FINISHED, step, round, None)]


__all__ = ["GATE_TOOL", "approval_id", "gate_step", "map_step", "wait_step"]
