"""Flows: definitions (catalog kind ``flow``), flow-run events (``nexus.flow.v1.<id>.<event>``)
and the flows service's queries (``nexus.flows.v1.get|list``). docs/flows.md is the guide.

A flow carries a task through agents: `run` steps (one agent), `map` steps (one agent per item
of a list, joined by all/any/quorum), `gate` steps (a person approves) and `wait` steps (a timer
or a correlated external event). After a step, its `next` routes are tried in order (the first
whose `when` holds wins); without routes the flow goes on with the next step in the list, and
after the last one it is completed. Routes may go back: a step entered again runs a new round,
and every cycle has a step with `max_rounds`, past which the flow escalates to the step named
by `on_max_rounds` (a gate) or fails with reason `max_rounds`.

Conditions and input templates are CEL (`nexus_events.contract.expressions`), evaluated over
``task`` (id, input, repo), ``input`` (the flow request's input), ``flow`` (id, run id,
revision), ``item`` / ``index`` (in a map step) and one entry per finished step, by step id:
a run step's validated `finish.details` (its typed output), a map step's ``{items, succeeded,
failed}``, a gate's ``{approved, decided_by, comment}``, a wait's ``{by, payload}``; every step
id is defined, ``{}`` until the step has finished (so ``has(review.verdict)`` works). And
``steps.<id>``: the step's last ``{status, reason, run_id, round, branch, summary}``.
"""

from __future__ import annotations

import hashlib
import re
from datetime import datetime
from enum import StrEnum
from typing import Annotated, Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from nexus_events.contract import flowgraph
from nexus_events.contract.subjects import Family, validate_token
from nexus_events.events.base import Command, Event, register
from nexus_events.events.catalog import _CatalogCommand
from nexus_events.events.channels import ChannelAddress
from nexus_events.events.runs import Origin
from nexus_events.events.specs import RepoSpec, Spec

# Step ids are short and have no '-': a step's run id `<flow_run_id>-<step>-r<round>[-i<item>]`
# then splits one way only, whatever the flow run id holds.
STEP_ID = re.compile(r"[a-z][a-z0-9_]{0,31}")
END = flowgraph.END  # a route to `end` completes the flow
MAX_STEPS = 64
MAX_ROUNDS = 100


class FlowReason:
    """Reason codes of a flow's terminal events (and of `escalated`)."""

    SUCCEEDED = "succeeded"
    UNKNOWN_FLOW = "unknown_flow"
    INVALID_REQUEST = "invalid_request"
    STEP_FAILED = "step_failed"
    MAX_ROUNDS = "max_rounds"
    GATE_DENIED = "gate_denied"
    WAIT_TIMEOUT = "wait_timeout"
    INVALID_OUTPUT = "invalid_output"
    EXPRESSION_ERROR = "expression_error"
    USER_REQUESTED = "user_requested"


def _expression(value: str) -> str:
    from nexus_events.contract.expressions import compile_expression  # the `flows` extra

    compile_expression(value)
    return value


def _template(value: str) -> str:
    from nexus_events.contract.expressions import compile_template  # the `flows` extra

    compile_template(value)
    return value


def _step_id(value: str) -> str:
    if STEP_ID.fullmatch(value) is None or value == END:
        raise ValueError(
            f"invalid step id {value!r}: lower-case letters, digits and '_', starting with a"
            f" letter, at most 32 characters, not {END!r}"
        )
    return value


class Route(Spec):
    """Where to go after a step: the first route whose `when` holds (no `when`: always)."""

    to: str = Field(..., description=f"Step id to go to, or {END!r} to complete the flow.")
    when: str | None = Field(None, description="CEL condition over the flow's outputs.")

    @field_validator("when")
    @classmethod
    def _when(cls, value: str | None) -> str | None:
        return None if value is None else _expression(value)


class _Step(Spec):
    id: str = Field(..., description="Step id, unique in the flow (lower-case, digits, '_').")
    description: str = Field("", description="What the step is for.")
    next: list[Route] = Field(
        default_factory=list,
        description="Routes tried in order after the step; none matching (or none given):"
        " the next step in the list, or the end after the last.",
    )
    max_rounds: int | None = Field(
        None, ge=1, le=MAX_ROUNDS, description="Most times the step may run in one flow run."
    )
    on_max_rounds: str | None = Field(
        None,
        description="A gate step to escalate to when max_rounds is spent; None = the flow"
        " fails with reason max_rounds.",
    )

    @field_validator("id")
    @classmethod
    def _id(cls, value: str) -> str:
        return _step_id(value)


class RunStep(_Step):
    kind: Literal["run"] = Field("run", description="Step kind.")
    agent: str = Field(..., description="Agent definition id.")
    input: str = Field("", description="Template of the run's input.")
    repo: RepoSpec | None = Field(None, description="Repository; None = the flow's.")
    plan_mode: bool | None = Field(None, description="Override the agent's plan_mode.")
    output_schema: dict[str, Any] | None = Field(
        None,
        description="JSON Schema the run's finish.details must fit to route (besides the"
        " agent's own output_schema).",
    )

    @field_validator("agent")
    @classmethod
    def _agent(cls, value: str) -> str:
        return validate_token(value, "agent id")

    @field_validator("input")
    @classmethod
    def _input(cls, value: str) -> str:
        return _template(value)


class Quorum(Spec):
    quorum: int = Field(..., ge=1, description="Successes that complete the step.")


class MapStep(_Step):
    kind: Literal["map"] = Field("map", description="Step kind.")
    over: str = Field(..., description="CEL expression giving the list to fan out over.")
    agent: str = Field(..., description="Agent definition id run once per item.")
    input: str = Field("", description="Template of each run's input (sees item and index).")
    repo: RepoSpec | None = Field(None, description="Repository; None = the flow's.")
    concurrency: int = Field(4, ge=1, le=100, description="Most item runs live at once.")
    join: Literal["all", "any"] | Quorum = Field(
        "all",
        description="all: every item succeeds; any: the first success completes the step;"
        " {quorum: N}: N successes do. Runs no longer needed are cancelled.",
    )
    max_items: int = Field(50, ge=1, le=500, description="A longer list fails the step.")

    @field_validator("agent")
    @classmethod
    def _agent(cls, value: str) -> str:
        return validate_token(value, "agent id")

    @field_validator("over")
    @classmethod
    def _over(cls, value: str) -> str:
        return _expression(value)

    @field_validator("input")
    @classmethod
    def _input(cls, value: str) -> str:
        return _template(value)


class GateStep(_Step):
    kind: Literal["gate"] = Field("gate", description="Step kind.")
    summary: str = Field(..., min_length=1, description="Template of what a person approves.")
    expires_in: float = Field(
        86_400, gt=0, description="Seconds until the gate decides itself with `default`."
    )
    default: Literal["approved", "denied"] = Field(
        "denied", description="The decision when the gate expires."
    )
    approvers: list[str] = Field(
        default_factory=list,
        description="Who may decide (docs/approvals.md principals); empty = the defaults.",
    )

    @field_validator("summary")
    @classmethod
    def _summary(cls, value: str) -> str:
        return _template(value)


class WaitEvent(Spec):
    """An external event that ends a wait: a channel-gateway webhook of `source` (or a
    ``signal`` on the flow run) whose correlation value equals the rendered `correlation`."""

    source: str | None = Field(
        None, description="Webhook source (channel gateway); None = `signal` events only."
    )
    correlation: str = Field(..., description="Template of the correlation id to wait for.")
    key: str = Field(
        "payload.correlation_id",
        description="CEL over {source, kind, payload} giving a webhook's correlation id.",
    )
    when: str | None = Field(None, description="CEL over {source, kind, payload}: also must hold.")

    @field_validator("correlation")
    @classmethod
    def _correlation(cls, value: str) -> str:
        return _template(value)

    @field_validator("key", "when")
    @classmethod
    def _expressions(cls, value: str | None) -> str | None:
        return None if value is None else _expression(value)


class WaitStep(_Step):
    kind: Literal["wait"] = Field("wait", description="Step kind.")
    timer: float | None = Field(None, gt=0, description="Seconds to wait.")
    event: WaitEvent | None = Field(None, description="An external event to wait for.")
    timeout: float | None = Field(
        None, gt=0, description="Seconds an event wait may take; then reason wait_timeout."
    )

    @model_validator(mode="after")
    def _one(self) -> WaitStep:
        if (self.timer is None) == (self.event is None):
            raise ValueError("a wait step needs exactly one of timer, event")
        return self


Step = Annotated[RunStep | MapStep | GateStep | WaitStep, Field(discriminator="kind")]


class FlowDefinition(Spec):
    """A flow, as an operator writes it (YAML, `nexus flows apply`)."""

    id: str = Field(..., description="Flow id, a subject token.")
    description: str = Field("", description="What the flow is for.")
    repo: RepoSpec | None = Field(None, description="Repository every run step works in.")
    steps: list[Step] = Field(..., min_length=1, max_length=MAX_STEPS, description="The steps.")
    team: str | None = Field(
        None, description="The team its runs count against unless the task or request names one."
    )

    @field_validator("id")
    @classmethod
    def _token(cls, value: str) -> str:
        return validate_token(value, "flow id")

    @field_validator("team")
    @classmethod
    def _team(cls, value: str | None) -> str | None:
        return None if value is None else validate_token(value, "team")

    @model_validator(mode="after")
    def _graph(self) -> FlowDefinition:
        flowgraph.check_graph(self)
        return self

    def step(self, step_id: str) -> RunStep | MapStep | GateStep | WaitStep:
        for s in self.steps:
            if s.id == step_id:
                return s
        raise KeyError(step_id)

    def agents(self) -> list[str]:
        """Agent ids the flow's steps run, in step order, once each."""
        seen: dict[str, None] = {}
        for s in self.steps:
            if isinstance(s, RunStep | MapStep):
                seen.setdefault(s.agent, None)
        return list(seen)


def step_run_id(flow_run_id: str, step: str, round: int, item: int | None = None) -> str:
    """The run id of a step's run (or a gate's approval): the same for the same (flow run,
    step, round, item), so a restarted flows service asks for the same run, never a second."""
    base = f"{flow_run_id}-{step}-r{round}" + ("" if item is None else f"-i{item}")
    if len(base) <= 128:
        return base
    digest = hashlib.sha256(base.encode()).hexdigest()[:32]
    return f"{flow_run_id[:60]}-{step}-{digest}"[:128]


# -- catalog ------------------------------------------------------------------------------


@register
class FlowApplied(_CatalogCommand):
    event_name: ClassVar[str] = "flow.applied"

    definition: FlowDefinition = Field(..., description="The whole definition.")
    applied_by: str | None = Field(None, description="Who applied it.")


@register
class FlowDeleted(_CatalogCommand):
    event_name: ClassVar[str] = "flow.deleted"

    deleted_by: str | None = Field(None, description="Who deleted it.")


# -- flow runs ----------------------------------------------------------------------------


class FlowEvent(StrEnum):
    """The name of every flow-run event: the last token of ``nexus.flow.v1.<id>.<event>``."""

    REQUESTED = "requested"
    ACCEPTED = "accepted"
    STEP_STARTED = "step_started"
    STEP_FINISHED = "step_finished"
    WAITING = "waiting"
    RESUMED = "resumed"
    ESCALATED = "escalated"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"
    CANCEL_REQUESTED = "cancel_requested"
    RESUME_REQUESTED = "resume_requested"
    SIGNAL = "signal"


class FlowStatus(StrEnum):
    REQUESTED = "requested"
    RUNNING = "running"
    WAITING = "waiting"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"


FLOW_TERMINAL = frozenset({FlowStatus.COMPLETED, FlowStatus.FAILED, FlowStatus.CANCELLED})


class StepStatus(StrEnum):
    """Where one step (one round, one map item) of a flow run is."""

    RUNNING = "running"
    WAITING = "waiting"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"


STEP_ENDED = frozenset({StepStatus.SUCCEEDED, StepStatus.FAILED, StepStatus.CANCELLED})


class _FlowEvent(Event):
    event_family: ClassVar[Family] = Family.FLOW


class _FlowCommand(Command):
    event_family: ClassVar[Family] = Family.FLOW


@register
class FlowRequested(_FlowCommand):
    """Start a flow run. On ``nexus.flow.v1.new.requested`` the flows service picks the id."""

    event_name: ClassVar[str] = FlowEvent.REQUESTED

    flow: str = Field(..., description="Flow definition id.")
    revision: int | None = Field(None, ge=1, description="Definition revision; None = latest.")
    task_id: str | None = Field(None, description="Task the flow works on.")
    input: str = Field("", description="Free-text input, `input` in templates.")
    repo: RepoSpec | None = Field(None, description="Repository; None = the definition's.")
    origin: Origin = Field(Origin.NATS, description="Where the request came from.")
    requested_by: str | None = Field(None, description="Person or service asking.")
    labels: dict[str, str] = Field(default_factory=dict, description="Free labels.")
    reply_to: ChannelAddress | None = Field(
        None, description="Chat thread that asked: progress and gates are posted there."
    )
    team: str | None = Field(
        None, description="The team its runs count against; None = the task's or the flow's."
    )

    @field_validator("flow", "task_id", "team")
    @classmethod
    def _tokens(cls, value: str | None) -> str | None:
        return None if value is None else validate_token(value, "id")


@register
class FlowAccepted(_FlowEvent):
    """The definition revision the flow run is pinned to: the audit record of what it runs."""

    event_name: ClassVar[str] = FlowEvent.ACCEPTED

    flow: str = Field(..., description="Flow definition id.")
    revision: int = Field(..., ge=1, description="Definition revision pinned.")
    definition: FlowDefinition = Field(..., description="The definition at that revision.")


class _StepEvent(_FlowEvent):
    step: str = Field(..., description="Step id.")
    round: int = Field(1, ge=1, description="How many times the step has been entered.")
    item: int | None = Field(None, ge=0, description="Map item index; None outside a map.")


@register
class FlowStepStarted(_StepEvent):
    event_name: ClassVar[str] = FlowEvent.STEP_STARTED

    kind: Literal["run", "map", "gate", "wait"] = Field(..., description="Step kind.")
    run_id: str | None = Field(None, description="The step's run (derived, see step_run_id).")
    agent_id: str | None = Field(None, description="Agent of a run or map item.")
    input: str = Field("", description="Rendered input, cut to 4,000 characters.")
    items: int | None = Field(None, ge=0, description="A map step's item count.")


@register
class FlowStepFinished(_StepEvent):
    event_name: ClassVar[str] = FlowEvent.STEP_FINISHED

    # The members of STEP_ENDED, spelled once (a Literal keeps the schema a plain string enum).
    status: Literal[StepStatus.SUCCEEDED, StepStatus.FAILED, StepStatus.CANCELLED] = Field(
        ..., description="Outcome."
    )
    reason: str = Field(FlowReason.SUCCEEDED, description="Reason code (a run's, or a flow's).")
    message: str = Field("", description="Human-readable detail.")
    run_id: str | None = Field(None, description="The run it stands for, if any.")
    output: dict[str, Any] = Field(
        default_factory=dict, description="The step's output as conditions and templates see it."
    )
    summary: str = Field("", description="A run's result summary.")
    branch: str | None = Field(None, description="A run's work branch (the next step reads it).")


@register
class FlowWaiting(_StepEvent):
    event_name: ClassVar[str] = FlowEvent.WAITING

    kind: Literal["gate", "timer", "event"] = Field(..., description="What it waits for.")
    until: datetime | None = Field(None, description="Expiry (gate), fire time or timeout.")
    summary: str = Field("", description="A gate's rendered summary.")
    approval_id: str | None = Field(None, description="A gate's approval id.")
    gate_run_id: str | None = Field(
        None, description="A gate's approval subject id: answer on agent.inbox.v1.<gate_run_id>."
    )
    correlation_id: str | None = Field(None, description="An event wait's correlation id.")
    source: str | None = Field(None, description="An event wait's webhook source.")


@register
class FlowResumed(_StepEvent):
    event_name: ClassVar[str] = FlowEvent.RESUMED

    by: Literal["approved", "denied", "expired", "timer", "event", "timeout"] = Field(
        ..., description="What ended the wait."
    )
    decided_by: str | None = Field(None, description="Who decided a gate.")
    comment: str | None = Field(None, description="A gate decision's note.")
    payload: Any = Field(None, description="The event that ended an event wait.")


@register
class FlowEscalated(_StepEvent):
    event_name: ClassVar[str] = FlowEvent.ESCALATED

    reason: str = Field(FlowReason.MAX_ROUNDS, description="Why.")
    to: str | None = Field(None, description="The gate step escalated to; None = none.")


class FlowTerminal(_FlowEvent):
    reason: str = Field(..., description="Reason code (FlowReason).")
    message: str = Field("", description="Human-readable detail.")


@register
class FlowCompleted(FlowTerminal):
    event_name: ClassVar[str] = FlowEvent.COMPLETED

    reason: str = Field(FlowReason.SUCCEEDED, description="Reason code.")
    outputs: dict[str, Any] = Field(default_factory=dict, description="Each step's last output.")


@register
class FlowFailed(FlowTerminal):
    event_name: ClassVar[str] = FlowEvent.FAILED

    step: str | None = Field(None, description="The step it failed at.")


@register
class FlowCancelled(FlowTerminal):
    event_name: ClassVar[str] = FlowEvent.CANCELLED

    reason: str = Field(FlowReason.USER_REQUESTED, description="Reason code.")
    cancelled_by: str | None = Field(None, description="Who asked.")


@register
class FlowCancelRequested(_FlowCommand):
    """Stop a flow run: its live runs are cancelled, then the flow is `cancelled`."""

    event_name: ClassVar[str] = FlowEvent.CANCEL_REQUESTED

    reason: str = Field(FlowReason.USER_REQUESTED, description="Why.")
    requested_by: str | None = Field(None, description="Person or service asking.")


@register
class FlowResumeRequested(_FlowCommand):
    """Run a failed flow's failed step again, in a new round (`nexus flow resume`)."""

    event_name: ClassVar[str] = FlowEvent.RESUME_REQUESTED

    requested_by: str | None = Field(None, description="Person or service asking.")


@register
class FlowSignal(_FlowCommand):
    """An external event for an event wait of this flow run (a bare `nats pub` works)."""

    event_name: ClassVar[str] = FlowEvent.SIGNAL

    correlation_id: str = Field(..., min_length=1, description="Matches a wait's correlation.")
    payload: Any = Field(None, description="What the wait's output `payload` will be.")
    sent_by: str | None = Field(None, description="Who sent it.")


# -- queries (nexus.flows.v1.get|list) ----------------------------------------------------


class _Query(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class _Reply(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")


class FlowsGet(_Query):
    """Body of a ``nexus.flows.v1.get`` request."""

    flow_run_id: str = Field(..., description="Flow run id.")

    @field_validator("flow_run_id")
    @classmethod
    def _token(cls, value: str) -> str:
        return validate_token(value, "flow run id")


class FlowsList(_Query):
    """Body of a ``nexus.flows.v1.list`` request: filters and one page, newest first."""

    status: FlowStatus | None = Field(None, description="Only flow runs in this status.")
    flow: str | None = Field(None, max_length=128, description="Only runs of this flow.")
    task_id: str | None = Field(None, max_length=128, description="Only runs for this task.")
    limit: int = Field(50, ge=1, le=500, description="Page size.")
    cursor: str | None = Field(None, pattern=r"^[0-9]{1,19}$", description="next_cursor.")


class FlowStepView(_Reply):
    """One step (one round, one map item) of a flow run."""

    step: str
    kind: str
    round: int
    item: int | None = None
    status: str = Field(..., description="running, waiting, succeeded, failed, cancelled.")
    run_id: str | None = None
    agent_id: str | None = None
    reason: str | None = None
    approval_id: str | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None


class FlowRunView(_Reply):
    """A flow run as the flows service projects it."""

    flow_run_id: str
    flow: str
    revision: int | None = None
    status: FlowStatus
    reason: str | None = None
    message: str = ""
    task_id: str | None = None
    current_step: str | None = Field(None, description="The step live or waiting now.")
    origin: str | None = None
    requested_by: str | None = None
    requested_at: datetime | None = None
    updated_at: datetime | None = None
    steps: list[FlowStepView] = Field(default_factory=list, description="Oldest first.")
    outputs: dict[str, Any] = Field(default_factory=dict, description="Last output per step.")


class FlowsListReply(_Reply):
    """One page of flow runs."""

    flows: list[FlowRunView] = Field(default_factory=list, description="Newest first.")
    next_cursor: str | None = None
