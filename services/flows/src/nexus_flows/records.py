"""The typed state of one flow run: the document stored in ``flows.flow_runs.state``.

Every field keeps the name and JSON form the state had as a plain dict (times as
``datetime.isoformat()`` strings, `ended_at` absent until the flow first ends), so a state
stored before the types existed loads, and one written now reads back as the same document.
`nexus_flows.state.fold` builds it; decide, the engine, the bridges and the queries read it.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from nexus_events.events.flows import (
    FLOW_TERMINAL,
    FlowResumed,
    FlowStatus,
    FlowStepStarted,
    FlowWaiting,
    StepStatus,
)
from nexus_events.events.runs import Origin
from nexus_events.events.specs import RepoSpec
from pydantic import BaseModel, ConfigDict, Field, PlainSerializer

# The stored form of a time: `isoformat()` ("+00:00", not pydantic's "Z").
IsoTime = Annotated[datetime, PlainSerializer(datetime.isoformat, return_type=str)]


class _Document(BaseModel):
    # Mutable: `fold` changes a deep copy in place. Fields a later version adds are ignored
    # by an older replica reading its state, as consumers ignore unknown event fields.
    model_config = ConfigDict(extra="ignore")


class WaitingOn(_Document):
    """What a waiting step waits for (its `waiting` event)."""

    kind: Literal["gate", "timer", "event"]
    until: IsoTime | None
    summary: str
    approval_id: str | None
    gate_run_id: str | None
    correlation_id: str | None
    source: str | None

    @classmethod
    def of(cls, event: FlowWaiting) -> WaitingOn:
        return cls(
            kind=event.kind,
            until=event.until,
            summary=event.summary,
            approval_id=event.approval_id,
            gate_run_id=event.gate_run_id,
            correlation_id=event.correlation_id,
            source=event.source,
        )


ResumedBy = Literal["approved", "denied", "expired", "timer", "event", "timeout"]


class Resumption(_Document):
    """What ended a wait (its `resumed` event)."""

    by: ResumedBy
    decided_by: str | None
    comment: str | None
    payload: Any

    @classmethod
    def of(cls, event: FlowResumed) -> Resumption:
        return cls(
            by=event.by, decided_by=event.decided_by, comment=event.comment, payload=event.payload
        )


class SignalReceived(_Document):
    """The first `signal` that matched an event wait."""

    payload: Any
    sent_by: str | None


StepKind = Literal["run", "map", "gate", "wait"]


class StepRecord(_Document):
    """One step of a flow run: one round of it, or one map item of a round."""

    step: str
    kind: StepKind
    round: int
    item: int | None
    status: StepStatus
    run_id: str | None
    agent_id: str | None
    input: str
    items: int | None
    reason: str | None
    message: str
    output: dict[str, Any] | None
    summary: str
    branch: str | None
    waiting: WaitingOn | None
    resumed: Resumption | None
    signal: SignalReceived | None
    started_at: IsoTime | None
    finished_at: IsoTime | None
    # Start order (jsonb does not keep the document's key order).
    n: int

    @classmethod
    def started(cls, event: FlowStepStarted, at: datetime | None, n: int) -> StepRecord:
        return cls(
            step=event.step, kind=event.kind, round=event.round, item=event.item,
            status=StepStatus.RUNNING, run_id=event.run_id, agent_id=event.agent_id,
            input=event.input, items=event.items, reason=None, message="", output=None,
            summary="", branch=None, waiting=None, resumed=None, signal=None, started_at=at,
            finished_at=None, n=n,
        )  # fmt: skip


class LastOutcome(_Document):
    """How a step's last round ended: ``steps.<id>`` in conditions and templates."""

    status: StepStatus
    reason: str
    run_id: str | None
    round: int
    branch: str | None
    summary: str


class Escalation(_Document):
    """A step past its max_rounds, escalated to a gate (`to`) until that gate finishes."""

    step: str
    round: int
    to: str | None


class CancelRequest(_Document):
    reason: str
    requested_by: str | None


class FlowState(_Document):
    """One flow run as its events made it."""

    flow_run_id: str
    flow: str
    requested_revision: int | None
    revision: int | None
    # The pinned definition as `accepted` carried it (JSON): the engine validates it once per
    # revision (`Engine.definition`), not on every load of the state.
    definition: dict[str, Any] | None
    status: FlowStatus
    reason: str | None
    message: str
    task_id: str | None
    input: str
    repo: RepoSpec | None
    origin: Origin
    requested_by: str | None
    labels: dict[str, str]
    requested_at: IsoTime | None
    updated_at: IsoTime | None
    steps: dict[str, StepRecord] = Field(description="By step_key: <step>/<round>/<item or ''>.")
    current: str | None = Field(description="step_key of the step (outside maps) started last.")
    rounds: dict[str, int] = Field(description="Step id -> its last round.")
    bonus: dict[str, int] = Field(description="Step id -> rounds granted by escalation gates.")
    outputs: dict[str, dict[str, Any]] = Field(description="Step id -> its last output.")
    last: dict[str, LastOutcome]
    escalation: Escalation | None
    cancel: CancelRequest | None
    resume: str | None = Field(description="The failed step a resume runs again, until it starts.")
    resumes: int
    failed_step: str | None
    ended_at: IsoTime | None = None
    # The team the request names (docs/spend.md); stored states from before have none.
    team: str | None = None

    @property
    def terminal(self) -> bool:
        return self.status in FLOW_TERMINAL

    def step_ids(self) -> set[str]:
        """The step ids of the pinned definition (none before `accepted`)."""
        if self.definition is None:
            return set()
        return {str(step["id"]) for step in self.definition["steps"]}

    def document(self) -> dict[str, Any]:
        """The stored JSON form (`ended_at` left out until the flow first ends, and `team`
        while there is none, so the states stored before either write back the same)."""
        doc = self.model_dump(mode="json")
        if self.ended_at is None:
            del doc["ended_at"]
        if self.team is None:
            del doc["team"]
        return doc

    @classmethod
    def load(cls, raw: str | bytes) -> FlowState:
        """A stored document (any written since the flows service began) as a state."""
        return cls.model_validate_json(raw)


__all__ = [
    "CancelRequest",
    "Escalation",
    "FlowState",
    "IsoTime",
    "LastOutcome",
    "Resumption",
    "SignalReceived",
    "StepKind",
    "StepRecord",
    "WaitingOn",
]
