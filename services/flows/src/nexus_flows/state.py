"""A flow run's state as a pure, idempotent fold of its NEXUS_FLOWS events.

The state is one JSON document per flow run (stored in ``flows.flow_runs.state``); its step
records (one per step, round and map item) are also written to ``flows.flow_steps`` for
queries and look-ups. `fold` never reads the clock or anything but the event and the time
JetStream stored it, so replaying the stream into empty tables gives the same rows, and an
event applied twice changes nothing: every change is guarded by the record it would create
or by the status it moves from. Terminal flow states are final, except that a
`resume_requested` re-opens a `failed` flow at its failed step.
"""

from __future__ import annotations

from datetime import datetime

from nexus_events.events import Event
from nexus_events.events.flows import (
    STEP_ENDED,
    FlowAccepted,
    FlowCancelled,
    FlowCancelRequested,
    FlowCompleted,
    FlowDefinition,
    FlowEscalated,
    FlowFailed,
    FlowRequested,
    FlowResumed,
    FlowResumeRequested,
    FlowSignal,
    FlowStatus,
    FlowStepFinished,
    FlowStepStarted,
    FlowWaiting,
    StepStatus,
)

from nexus_flows.records import (
    CancelRequest,
    Escalation,
    FlowState,
    LastOutcome,
    Resumption,
    SignalReceived,
    StepRecord,
    WaitingOn,
)


def step_key(step: str, round: int, item: int | None = None) -> str:
    """The key of one step record: ``<step>/<round>/<item or ''>``."""
    return f"{step}/{round}/{'' if item is None else item}"


def new_state(flow_run_id: str, event: FlowRequested, at: datetime | None) -> FlowState:
    return FlowState(
        flow_run_id=flow_run_id,
        flow=event.flow,
        requested_revision=event.revision,
        revision=None,
        definition=None,
        status=FlowStatus.REQUESTED,
        reason=None,
        message="",
        task_id=event.task_id,
        input=event.input,
        repo=event.repo,
        origin=event.origin,
        requested_by=event.requested_by,
        team=event.team,
        labels=dict(event.labels),
        requested_at=at,
        updated_at=at,
        steps={},
        current=None,
        rounds={},
        bonus={},
        outputs={},
        last={},
        escalation=None,
        cancel=None,
        resume=None,
        resumes=0,
        failed_step=None,
    )


def fold(
    state: FlowState | None, flow_run_id: str, event: Event, at: datetime | None
) -> FlowState | None:
    """The state after `event` (stored at `at`); `state` itself is left unchanged.

    Returns None while the flow run has no `requested` event (nothing else can start it)."""
    if state is None:
        if isinstance(event, FlowRequested):
            return new_state(flow_run_id, event, at)
        return None
    # A deep copy through pydantic-core, a quarter of `model_copy(deep=True)`'s time (whose
    # `copy.deepcopy` was the largest pure-Python item of the burst's profile).
    s = FlowState.model_validate(state.model_dump())
    changed = _apply(s, event, at)
    if changed:
        s.updated_at = at
        return s
    return state


def _apply(s: FlowState, event: Event, at: datetime | None) -> bool:  # noqa: PLR0911, PLR0912
    terminal = s.terminal
    if isinstance(event, FlowRequested):
        return False  # the first one made the state
    if isinstance(event, FlowAccepted):
        if s.definition is not None or terminal:
            return False
        definition = event.definition.model_dump(mode="json")
        if definition.get("team") is None:
            # A flow naming no team is stored as before teams (issue 40): the same document.
            definition.pop("team", None)
        s.definition = definition
        s.revision = event.revision
        s.status = FlowStatus.RUNNING
        return True
    if isinstance(event, FlowStepStarted):
        return _started(s, event, at, terminal)
    if isinstance(event, FlowWaiting):
        rec = s.steps.get(step_key(event.step, event.round, event.item))
        if terminal or rec is None or rec.status != StepStatus.RUNNING or rec.waiting is not None:
            return False
        rec.waiting = WaitingOn.of(event)
        rec.status = StepStatus.WAITING
        s.status = FlowStatus.WAITING
        return True
    if isinstance(event, FlowResumed):
        rec = s.steps.get(step_key(event.step, event.round, event.item))
        if terminal or rec is None or rec.status != StepStatus.WAITING or rec.resumed is not None:
            return False
        rec.resumed = Resumption.of(event)
        rec.status = StepStatus.RUNNING
        s.status = FlowStatus.RUNNING
        return True
    if isinstance(event, FlowSignal):
        return _signal(s, event, terminal)
    if isinstance(event, FlowStepFinished):
        return _finished(s, event, at)
    if isinstance(event, FlowEscalated):
        if terminal or s.escalation is not None:
            return False
        s.escalation = Escalation(step=event.step, round=event.round, to=event.to)
        return True
    if isinstance(event, FlowCompleted | FlowFailed | FlowCancelled):
        if terminal:
            return False
        s.status = FlowStatus(event.event_name)
        s.reason = event.reason
        s.message = event.message
        s.ended_at = at
        if isinstance(event, FlowFailed):
            s.failed_step = event.step
        s.resume = None
        return True
    if isinstance(event, FlowCancelRequested):
        if terminal or s.cancel is not None:
            return False
        s.cancel = CancelRequest(reason=event.reason, requested_by=event.requested_by)
        return True
    if isinstance(event, FlowResumeRequested):
        if s.status != FlowStatus.FAILED or not s.failed_step or not s.definition:
            return False
        s.status = FlowStatus.RUNNING
        s.reason = None
        s.message = ""
        s.resume = s.failed_step
        s.resumes += 1
        s.escalation = None
        return True
    return False


def _started(s: FlowState, event: FlowStepStarted, at: datetime | None, terminal: bool) -> bool:
    key = step_key(event.step, event.round, event.item)
    if terminal or key in s.steps or s.definition is None:
        return False
    if event.step not in s.step_ids():
        return False  # not a step of the pinned definition: nothing could decide after it
    s.steps[key] = StepRecord.started(event, at, n=len(s.steps))
    if event.item is None:
        s.current = key
        s.rounds[event.step] = max(s.rounds.get(event.step, 0), event.round)
        if s.resume == event.step:
            s.resume = None
    return True


def _signal(s: FlowState, event: FlowSignal, terminal: bool) -> bool:
    rec = s.steps.get(s.current or "")
    if terminal or rec is None or rec.kind != "wait" or rec.status != StepStatus.WAITING:
        return False
    waiting = rec.waiting
    if waiting is None or waiting.kind != "event":
        return False
    if waiting.correlation_id != event.correlation_id:
        return False
    if rec.signal is not None:
        return False  # the first matching signal wins
    rec.signal = SignalReceived(payload=event.payload, sent_by=event.sent_by)
    return True


def _finished(s: FlowState, event: FlowStepFinished, at: datetime | None) -> bool:
    key = step_key(event.step, event.round, event.item)
    rec = s.steps.get(key)
    if rec is None or rec.status in STEP_ENDED:
        return False
    # Recorded even on a terminal flow: a cancelled flow's runs still report how they ended.
    rec.status = StepStatus(event.status)
    rec.reason = event.reason
    rec.message = event.message
    rec.output = event.output
    rec.summary = event.summary
    rec.branch = event.branch
    if event.run_id is not None:
        rec.run_id = event.run_id
    rec.finished_at = at
    if event.item is not None or s.terminal:
        return True
    s.outputs[event.step] = event.output
    s.last[event.step] = LastOutcome(
        status=event.status,
        reason=event.reason,
        run_id=rec.run_id,
        round=event.round,
        branch=event.branch,
        summary=event.summary,
    )
    esc = s.escalation
    if esc is not None and esc.to == event.step:
        # Approving the escalation gate grants the escalated step another max_rounds rounds.
        if event.status == StepStatus.SUCCEEDED and event.output.get("approved") is True:
            defn = FlowDefinition.model_validate(s.definition)
            extra = defn.step(esc.step).max_rounds or 0
            s.bonus[esc.step] = s.bonus.get(esc.step, 0) + extra
        s.escalation = None
    return True


__all__ = ["FlowState", "StepRecord", "fold", "new_state", "step_key"]
