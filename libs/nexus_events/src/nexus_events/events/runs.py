"""Run lifecycle events (``nexus.agent.run.v1.<run_id>.<event>``) and the RunConfig payload.

The run id is the subject token, not a body field: a body stays what a person would type.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from nexus_events.contract.runstate import RunEvent, RunStatus
from nexus_events.contract.subjects import Family, validate_token
from nexus_events.events.base import Command, Event, register
from nexus_events.events.channels import ChannelAddress, ConversationMessage
from nexus_events.events.egress import EgressGrant
from nexus_events.events.lab_specs import CanaryArm, LabSpec
from nexus_events.events.specs import (
    Budgets,
    Hooks,
    McpServerSpec,
    ModelSpec,
    Permissions,
    RepoSpec,
    ResumePolicy,
    RuntimeSpec,
    SandboxTool,
    ToolGrant,
)


class Origin(StrEnum):
    CLI = "cli"
    PLANE = "plane"
    CHANNEL = "channel"
    SCHEDULE = "schedule"
    AGENT = "agent"
    API = "api"
    NATS = "nats"
    # A lab run (docs/lab.md): a replay, a fork, an eval case. Its work stays in its workspace
    # (no push, no PR) and memory learns nothing from it.
    LAB = "lab"


class Reason:
    """Reason codes carried by terminal events (and `failed` in particular)."""

    SUCCEEDED = "succeeded"
    UNKNOWN_AGENT = "unknown_agent"
    UNKNOWN_SKILL = "unknown_skill"
    RUN_ID_CONFLICT = "run_id_conflict"
    INVALID_REQUEST = "invalid_request"
    LLM_UNAVAILABLE = "llm_unavailable"
    BUDGET_EXCEEDED = "budget_exceeded"
    STUCK = "stuck"
    RUNNER_ERROR = "runner_error"
    RUNTIME_ERROR = "runtime_error"
    USER_REQUESTED = "user_requested"
    TERMINATED = "terminated"
    DEADLINE_EXCEEDED = "deadline_exceeded"
    HEARTBEAT_MISSING = "heartbeat_missing"
    RUNTIME_GONE = "runtime_gone"
    ACCEPTANCE_FAILED = "acceptance_failed"
    SUPERSEDED = "superseded"  # cancelled by the next fire of its schedule
    # completed in plan mode: the plan was denied or its approval expired; the plan is the result
    PLAN_NOT_APPROVED = "plan_not_approved"
    # finish.details did not fit the agent's output_schema after the bounded retries
    INVALID_OUTPUT = "invalid_output"
    # attempt n+1 could not restore the run (transcript or checkpoint missing or corrupt):
    # it never runs from a wrong state (docs/resume.md)
    RESUME_FAILED = "resume_failed"
    # completed: a replay stopped at its first divergence from the recording (docs/lab.md)
    DIVERGED = "diverged"
    # failed: a lab run's source cannot be used (transcript expired, a fork past the source's
    # last turn or without a checkpoint for it)
    LAB_SOURCE_UNUSABLE = "lab_source_unusable"
    # `resuming` only: the previous attempt slept and the run woke (docs/resume.md, Sleep)
    WOKE = "woke"


class _RunEvent(Event):
    event_family: ClassVar[Family] = Family.RUN


class WakeCause(StrEnum):
    """What ended a run's sleep (docs/resume.md, Sleep)."""

    TIMER = "timer"  # the wake time came
    SIGNAL = "signal"  # a `wake_requested` (nexus run wake)
    MESSAGE = "message"  # a message on the run's inbox


class RunWake(BaseModel):
    """Why an attempt starts after a sleep: the scheduler puts it in `resuming` and in the
    attempt's config, and the runner tells the model in its next message."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    cause: WakeCause = Field(..., description="What woke the run.")
    slept_until: datetime = Field(..., description="The wake time the sleep asked for (UTC).")
    sleep_reason: str = Field("", description="The reason the agent gave when it slept.")
    text: str = Field(
        "", description="The wake's own words: the signal's reason or the inbox message."
    )
    requested_by: str | None = Field(None, description="Who woke it (signal or message).")


class _RunCommand(Command):
    event_family: ClassVar[Family] = Family.RUN


class SkillDoc(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")

    name: str = Field(..., description="Skill name.")
    version: str = Field(..., description="Skill version used.")
    content: str = Field(..., description="The skill's markdown body, as given to the model.")
    on_demand: bool = Field(
        False,
        description="Listed in the system prompt by name and description only; the model"
        " reads its content with the read_skill tool when it needs it.",
    )
    description: str = Field("", description="The skill's one-line description.")


class MemoryMatch(BaseModel):
    """Why a memory matched a search: its ranks in each retriever and the weights applied."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    semantic_rank: int | None = Field(None, description="Rank by vector similarity (1 = best).")
    similarity: float | None = Field(None, description="Cosine similarity to the query.")
    lexical_rank: int | None = Field(None, description="Rank by full-text match (1 = best).")
    fused: float = Field(0.0, description="Reciprocal-rank fusion of both ranks.")
    recency: float = Field(1.0, description="Recency weight (1 = new, 0.5 = one half-life).")
    access_count: int = Field(0, description="Times searches returned it before.")
    kind_weight: float = Field(1.0, description="Weight of its kind.")


class MemoryItem(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")

    memory_id: str = Field(..., description="Id of the memory record.")
    text: str = Field(..., description="The remembered text.")
    score: float | None = Field(None, description="Relevance score from the search.")
    source_run_id: str | None = Field(None, description="Run that recorded it, if any.")
    scope: str | None = Field(None, description="Scope token it lives in.")
    kind: str | None = Field(None, description="fact, decision, preference, ...")
    current: bool = Field(True, description="False when superseded or stale (non-strict search).")
    why: MemoryMatch | None = Field(None, description="Why it matched.")


class MemoryContext(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")

    status: Literal["ok", "empty", "unavailable", "timeout", "disabled"] = Field(
        "disabled", description="How the memory lookup went; the run starts either way."
    )
    items: list[MemoryItem] = Field(default_factory=list, description="Relevant memories.")


class RunConfig(BaseModel):
    """Exactly what a runner is given: the audit record of a run's inputs."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    run_id: str = Field(..., description="The run id (also the subject token).")
    agent_id: str = Field(..., description="Agent definition id.")
    task_id: str | None = Field(None, description="Task the run works on.")
    input: str = Field("", description="The request's free-text input for the agent.")
    origin: Origin = Field(Origin.NATS, description="Where the request came from.")
    system_prompt: str = Field(..., description="The agent's system prompt.")
    skills: list[SkillDoc] = Field(default_factory=list, description="Skills loaded in full.")
    memory: MemoryContext = Field(
        default_factory=MemoryContext, description="Memory context and how it was obtained."
    )
    tools: list[ToolGrant] = Field(default_factory=list, description="Granted tools.")
    permissions: Permissions = Field(default_factory=Permissions, description="What it may do.")
    mcp_servers: list[McpServerSpec] = Field(
        default_factory=list, description="MCP servers whose granted tools the run may use."
    )
    model: ModelSpec = Field(..., description="The LLM to use.")
    budgets: Budgets = Field(default_factory=Budgets, description="Limits of the run.")
    repo: RepoSpec | None = Field(None, description="Repository to clone into the workspace.")
    runtime: RuntimeSpec = Field(default_factory=RuntimeSpec, description="Isolation resources.")
    catalog_revisions: dict[str, int] = Field(
        default_factory=dict, description="Catalog revision used per item, e.g. 'agent/x': 3."
    )
    attempt: int = Field(1, ge=1, description="Attempt number of this run.")
    hooks: Hooks = Field(
        default_factory=Hooks, description="Policy hooks: the agent's, then its skills'."
    )
    max_concurrent_runs: int | None = Field(
        None,
        gt=0,
        description="The agent definition's admission limit (runs of this agent at once);"
        " None = the scheduler's default. A scheduler per-agent setting overrides it.",
    )
    plan_mode: bool = Field(
        False,
        description="Start in plan mode: only read tools until the plan submitted with"
        " exit_plan_mode is approved (docs/guardrails.md).",
    )
    output_schema: dict[str, Any] | None = Field(
        None, description="The agent's JSON Schema for finish.details (typed output)."
    )
    resume: ResumePolicy = Field(
        default_factory=ResumePolicy,
        description="The agent's resume policy: attempts when the runner dies.",
    )
    sandbox_tools: list[SandboxTool] = Field(
        default_factory=list,
        description="Sandboxed JavaScript tools: the agent's, then its skills' (docs/sandbox.md).",
    )
    egress: list[EgressGrant] = Field(
        default_factory=list,
        description="Egress grants: the agent's, then its skills' (docs/sandbox.md); none ="
        " its tools have no network.",
    )
    lab: LabSpec | None = Field(
        None, description="A replay or fork: the recorded run it follows (docs/lab.md)."
    )
    canary: CanaryArm | None = Field(
        None, description="The canary arm it was assembled with, when its agent has a canary."
    )
    team: str | None = Field(
        None,
        description="The team the run counts against (budgets, usage, approvals): the"
        " request's (a flow's steps carry the flow run's), else its task's, else its agent's"
        " (docs/spend.md).",
    )
    wake: RunWake | None = Field(
        None, description="Set on the attempt that starts after a sleep: why it woke."
    )
    conversation: list[ConversationMessage] = Field(
        default_factory=list,
        description="A chat conversation so far (docs/channels.md): the transcript begins with"
        " it, then the input.",
    )


@register
class RunRequested(_RunCommand):
    event_name: ClassVar[str] = RunEvent.REQUESTED

    agent_id: str = Field(..., description="Id of the agent definition to run.")
    task_id: str | None = Field(None, description="Task the run works on.")
    input: str = Field("", description="Free-text instructions for this run.")
    repo: RepoSpec | None = Field(None, description="Repository (URL or path) to work in.")
    origin: Origin = Field(Origin.NATS, description="Where the request came from.")
    requested_by: str | None = Field(None, description="Person or service asking.")
    parent_run_id: str | None = Field(None, description="Run that delegated this one.")
    labels: dict[str, str] = Field(default_factory=dict, description="Free labels.")
    reply_to: ChannelAddress | None = Field(
        None, description="Chat thread that asked for the run: its progress is posted there."
    )
    # None, not an empty list, when absent: core's request fingerprint (a JSON dump without
    # None) of a request stored before this field existed stays the same.
    conversation: list[ConversationMessage] | None = Field(
        None,
        max_length=200,
        description="The chat conversation so far, oldest first: the run's transcript begins"
        " with it (docs/channels.md, Conversations).",
    )
    plan_mode: bool | None = Field(
        None,
        description="Start in plan mode (true) or not (false) whatever the agent definition"
        " says; None = as the definition says.",
    )
    agent_revision: int | None = Field(
        None, ge=1, description="Assemble with this catalog revision of the agent; None = latest."
    )
    skill_revisions: dict[str, int] = Field(
        default_factory=dict,
        description="Assemble these skills (name -> catalog revision) instead of the agent's.",
    )
    model: str | None = Field(
        None, min_length=1, description="Use this model name instead of the agent's."
    )
    lab: LabSpec | None = Field(None, description="Replay or fork a recorded run (docs/lab.md).")
    team: str | None = Field(
        None,
        description="The team to count the run against; None = its task's, flow's or agent's.",
    )

    @field_validator("skill_revisions")
    @classmethod
    def _revisions(cls, value: dict[str, int]) -> dict[str, int]:
        for name, revision in value.items():
            validate_token(name, "skill name")
            if revision < 1:
                raise ValueError(f"skill {name}: a revision is 1 or more, not {revision}")
        return value

    @field_validator("agent_id", "task_id", "parent_run_id", "team")
    @classmethod
    def _tokens(cls, value: str | None) -> str | None:
        return None if value is None else validate_token(value, "id")


@register
class RunPrepared(_RunEvent):
    event_name: ClassVar[str] = RunEvent.PREPARED

    config: RunConfig = Field(..., description="The fully assembled run configuration.")


@register
class RunQueued(_RunEvent):
    event_name: ClassVar[str] = RunEvent.QUEUED

    position: int = Field(..., ge=1, description="1-based position in the admission queue.")
    limit: Literal["global", "agent", "task", "budget"] = Field(
        ..., description="The limit that is full (budget: a budget covering the run is reached)."
    )
    waiting_for: str | None = Field(
        None, description="Why it waits, in one line, when a budget holds it (docs/spend.md)."
    )


@register
class RunDispatched(_RunEvent):
    event_name: ClassVar[str] = RunEvent.DISPATCHED

    runtime: str = Field(..., description="Runtime kind: kubernetes or local.")
    handle: str = Field(..., description="Runtime handle (Job name, process id).")
    attempt: int = Field(1, ge=1, description="Attempt number.")
    warm: bool | None = Field(
        None,
        description=(
            "Whether a warm runner (started ahead, docs/warm-starts.md) was handed the run;"
            " None: the runtime does not say."
        ),
    )


@register
class RunStarted(_RunEvent):
    event_name: ClassVar[str] = RunEvent.STARTED

    runner: str | None = Field(None, description="Runner host/pod name.")
    runner_version: str | None = Field(None, description="Runner version.")
    base_commit: str | None = Field(
        None,
        description="The commit the workspace started from (a replay starts from the same).",
    )


@register
class RunHeartbeat(_RunEvent):
    event_name: ClassVar[str] = RunEvent.HEARTBEAT

    seq: int = Field(..., ge=0, description="Heartbeat counter within the run.")
    turn: int = Field(0, ge=0, description="Current turn.")
    phase: str | None = Field(None, description="What the runner is doing.")


@register
class RunTurn(_RunEvent):
    event_name: ClassVar[str] = RunEvent.TURN

    turn: int = Field(..., ge=1, description="Turn number, from 1.")
    model: str | None = Field(None, description="Model that answered.")
    tokens_in: int = Field(0, ge=0, description="Prompt tokens of this turn.")
    tokens_out: int = Field(0, ge=0, description="Completion tokens of this turn.")
    cost_usd: float = Field(0.0, ge=0, description="Cost of this turn in USD.")
    finish_reason: str | None = Field(None, description="The model's finish reason.")
    duration_ms: int | None = Field(None, ge=0, description="Latency of the model call.")
    replayed: bool = Field(
        False,
        description="Served from the recording of a replay's source run: no model was called"
        " (tokens and cost 0).",
    )


class GuardNote(BaseModel):
    """How the guard (auto-approve dial, command classifier, policy hooks) judged a call."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    decision: Literal["allow", "ask", "deny", "redact"] = Field(..., description="Its verdict.")
    rule: str | None = Field(None, description="Hook rule or table entry that decided.")
    reason: str = Field("", description="Why.")
    command_class: str | None = Field(None, description="Class of a shell command.")


@register
class ToolCalled(_RunEvent):
    event_name: ClassVar[str] = RunEvent.TOOL_CALLED

    turn: int = Field(..., ge=1, description="Turn of the call.")
    call_id: str = Field(..., description="The model's tool call id.")
    tool: str = Field(..., description="Tool name.")
    arguments: dict[str, Any] = Field(
        default_factory=dict, description="Arguments, truncated and with secrets redacted."
    )
    refused: bool = Field(False, description="True if the call was refused.")
    refusal_reason: str | None = Field(None, description="Why it was refused.")
    guard: GuardNote | None = Field(None, description="The guard's verdict on the call.")


@register
class ToolResult(_RunEvent):
    event_name: ClassVar[str] = RunEvent.TOOL_RESULT

    turn: int = Field(..., ge=1, description="Turn of the call.")
    call_id: str = Field(..., description="The model's tool call id.")
    tool: str = Field(..., description="Tool name.")
    ok: bool = Field(..., description="False if the tool failed.")
    output: str = Field("", description="Output, truncated and with secrets redacted.")
    truncated: bool = Field(False, description="True if output was cut.")
    duration_ms: int | None = Field(None, ge=0, description="Tool run time.")
    guard: GuardNote | None = Field(
        None, description="An after_tool_call hook's verdict on the output, if one matched."
    )


@register
class ApprovalRequested(_RunEvent):
    event_name: ClassVar[str] = RunEvent.APPROVAL_REQUESTED

    approval_id: str = Field(..., description="Id to answer with.")
    tool: str = Field(..., description="The gated tool.")
    summary: str = Field(..., description="What would be done (arguments summary).")
    why: str = Field("", description="Why approval is needed.")
    expires_at: datetime = Field(..., description="After this the request counts as denied.")


@register
class ApprovalDecided(_RunEvent):
    event_name: ClassVar[str] = RunEvent.APPROVAL_DECIDED

    approval_id: str = Field(..., description="The approval answered.")
    decision: Literal["approved", "denied", "expired"] = Field(..., description="Outcome.")
    decided_by: str | None = Field(None, description="Who decided.")
    comment: str | None = Field(None, description="Optional note for the agent.")
    surface: str | None = Field(
        None, description="Where it was decided (the decision's surface: cli, slack, plane ...)."
    )


@register
class ApprovalRefused(_RunEvent):
    """An answer the approver policy refused (docs/approvals.md): the audit record; the
    approval is untouched and still waits for someone who may decide it."""

    event_name: ClassVar[str] = RunEvent.APPROVAL_REFUSED

    approval_id: str = Field(..., description="The approval the answer was for.")
    decision: Literal["approve", "deny"] = Field(..., description="What the answer said.")
    answered_by: str = Field(..., description="Who answered (slack:U1, nats:alice, a Plane user).")
    surface: str = Field(..., description="Where: slack, telegram, plane, cli ...")
    where: str | None = Field(None, description="The chat it was written in (slack:C0123).")
    reason: str = Field(..., description="Why it was refused, as the person was told.")


# Why an MCP server of the run could not start (McpServerUnavailable.reason).
McpUnavailableReason = Literal[
    "command_not_found", "exited", "handshake_timeout", "missing_secret", "failed"
]


@register
class McpServerUnavailable(_RunEvent):
    """An MCP server of the run's agent could not start, so its tools are not offered in this
    run; the model is told the same (docs/mcp.md)."""

    event_name: ClassVar[str] = RunEvent.MCP_SERVER_UNAVAILABLE

    server: str = Field(..., description="The server's name in the agent definition.")
    reason: McpUnavailableReason = Field(
        ...,
        description="command_not_found (not on the run's PATH, or hidden from the sandbox),"
        " exited (before the handshake; exit_code), handshake_timeout (no answer within its"
        " startup_timeout), missing_secret (an env entry names an unknown runner secret),"
        " failed (anything else: detail says what).",
    )
    detail: str = Field(
        "", description="One line, secrets redacted: the command, the first line of stderr."
    )
    exit_code: int | None = Field(None, description="The server's exit code, if it exited.")


@register
class RunResuming(_RunEvent):
    """The scheduler found the runner of attempt `attempt - 1` gone and starts attempt
    `attempt`, which goes on from the last finished turn (docs/resume.md). Slots, budgets and
    the deadline carry over."""

    event_name: ClassVar[str] = RunEvent.RESUMING

    attempt: int = Field(..., ge=2, description="The attempt being started.")
    reason: str = Field(
        ..., description="Why the previous attempt ended (heartbeat_missing, runtime_gone ...)."
    )
    message: str = Field("", description="Human-readable detail.")
    wake: RunWake | None = Field(
        None, description="Set when the previous attempt slept (reason 'woke'): why it woke."
    )


@register
class RunResumed(_RunEvent):
    """Attempt `attempt`'s runner restored the run and is about to call the model again."""

    event_name: ClassVar[str] = RunEvent.RESUMED

    attempt: int = Field(..., ge=2, description="This attempt.")
    turns: int = Field(..., ge=0, description="Model turns finished before (they carry over).")
    messages: int = Field(..., ge=0, description="Messages restored from the transcript.")
    entries: int = Field(
        ...,
        ge=0,
        description="Transcript entries restored: this attempt writes its own from this index,"
        " and entries of older attempts at or past it are void.",
    )
    checkpoint: str | None = Field(
        None, description="Workspace checkpoint restored (commit sha); None = the clean clone."
    )
    rerun_calls: list[str] = Field(
        default_factory=list,
        description="Interrupted tool calls run again (idempotent ones): their call ids.",
    )
    interrupted_calls: list[str] = Field(
        default_factory=list,
        description="Interrupted tool calls not run again: the model is told their effect is"
        " unknown. Their call ids.",
    )
    latency_ms: int | None = Field(
        None, ge=0, description="From the previous attempt's last sign of life to this event."
    )


@register
class RunCheckpointed(_RunEvent):
    """The workspace after a turn that changed files, stored for a resume (docs/resume.md)."""

    event_name: ClassVar[str] = RunEvent.CHECKPOINTED

    turn: int = Field(..., ge=1, description="Turn after which it was taken.")
    commit: str = Field(..., description="Checkpoint commit sha (its tree is the workspace).")
    object: str = Field(..., description="Object-store name of the bundle holding it.")
    digest: str = Field(..., description="SHA-256 of the bundle, hex: checked on restore.")
    size: int = Field(..., ge=0, description="Bundle size in bytes.")
    files: int = Field(0, ge=0, description="Files changed against the base.")


class Condensation(BaseModel):
    """How a transcript was condensed before a model call: enough to redo it exactly.

    `elide`: the content of each message at `elided` (indexes into the messages as they were)
    is replaced by `placeholder` with `{chars}` filled in. `summarise`: the messages
    ``[start, end)`` are replaced by one user message holding `summary`.
    """

    model_config = ConfigDict(frozen=True, extra="ignore")

    strategy: Literal["elide", "summarise"] = Field(..., description="What was done.")
    elided: list[int] = Field(default_factory=list, description="elide: message indexes.")
    placeholder: str = Field("", description="elide: the text put in their place.")
    start: int | None = Field(None, ge=0, description="summarise: first message replaced.")
    end: int | None = Field(None, ge=0, description="summarise: end of the range (exclusive).")
    summary: str = Field("", description="summarise: the summary the model wrote.")

    def apply(self, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The messages after this condensation (a new list; `messages` is left as it was).

        Pure and exact, so a resumed attempt that folds its transcript, and anyone replaying
        the `condensed` events over the messages, gets the very messages the model was sent.
        An index or range that does not fit `messages` is a `ValueError`: the condensation
        was not made on these messages.
        """
        if self.strategy == "elide":
            out = list(messages)
            for i in self.elided:
                if not 0 <= i < len(out):
                    raise ValueError(f"elided index {i} outside {len(out)} messages")
                content = out[i].get("content")
                chars = len(content) if isinstance(content, str) else 0
                out[i] = {**out[i], "content": self.placeholder.replace("{chars}", str(chars))}
            return out
        start, end = self.start, self.end
        if start is None or end is None or not 0 <= start < end <= len(messages):
            raise ValueError(f"summarised range [{start}, {end}) outside {len(messages)} messages")
        return [*messages[:start], {"role": "user", "content": self.summary}, *messages[end:]]


@register
class RunCondensed(_RunEvent):
    """Older parts of the conversation were condensed to stay within the context budget."""

    event_name: ClassVar[str] = RunEvent.CONDENSED

    turn: int = Field(..., ge=1, description="The turn whose model call needed it.")
    tokens_before: int = Field(..., ge=0, description="Tokens of the messages before.")
    tokens_after: int = Field(..., ge=0, description="Tokens after.")
    budget: int = Field(..., ge=0, description="The context budget in tokens.")
    counter: str = Field(..., description="How tokens were counted (tiktoken:<enc>, estimate).")
    condensation: Condensation = Field(..., description="What was done, reproducibly.")
    llm_tokens_in: int = Field(0, ge=0, description="Prompt tokens of the summary's model call.")
    llm_tokens_out: int = Field(0, ge=0, description="Completion tokens of the summary's call.")
    cost_usd: float = Field(0.0, ge=0, description="USD of the summary's model call.")


@register
class RunBudgetPaused(_RunEvent):
    """A budget covering the run was reached and asks its approvers (docs/spend.md): the run
    waits, holding no scheduler slot, until the ask is answered."""

    event_name: ClassVar[str] = RunEvent.BUDGET_PAUSED

    budget_id: str = Field(..., description="The budget reached.")
    instance: str = Field(..., description="Its scope: team:alpha, task:T-1, global ...")
    bucket: str = Field(..., description="The period, e.g. 2026-11.")
    turn: int = Field(..., ge=1, description="The turn whose model call waits.")
    message: str = Field(..., description="One line: what was reached and who is asked.")
    ask_run_id: str | None = Field(None, description="The ask's pseudo-run id (its approval).")
    ask_approval_id: str | None = Field(None, description="The ask's approval id.")


@register
class RunBudgetResumed(_RunEvent):
    """The budget the run paused on was extended: it goes on."""

    event_name: ClassVar[str] = RunEvent.BUDGET_RESUMED

    budget_id: str = Field(..., description="The budget it paused on.")
    turn: int = Field(..., ge=1, description="The turn whose model call goes ahead.")
    waited_seconds: float = Field(0.0, ge=0, description="How long it waited.")


@register
class RunSleeping(_RunEvent):
    """The attempt ended to sleep (the `sleep` tool) after checkpointing its transcript and
    workspace: it holds no runner and no scheduler slot until the scheduler starts the next
    attempt at `until`, or earlier on a wake (docs/resume.md, Sleep)."""

    event_name: ClassVar[str] = RunEvent.SLEEPING

    until: datetime = Field(..., description="The wake time (UTC).")
    reason: str = Field("", max_length=2000, description="Why the agent sleeps (its words).")
    attempt: int = Field(..., ge=1, description="The attempt that ended to sleep.")
    turn: int = Field(..., ge=0, description="Turns finished before the sleep (they carry over).")


@register
class RunWakeRequested(_RunCommand):
    """Wake a sleeping run now (`nexus run wake`, or `nats pub`): its next attempt starts at
    once instead of at its wake time. Ignored for a run that is not sleeping."""

    event_name: ClassVar[str] = RunEvent.WAKE_REQUESTED

    reason: str = Field("", max_length=2000, description="Told to the model when it wakes.")
    requested_by: str | None = Field(None, description="Person or service asking.")


@register
class CancelRequested(_RunCommand):
    event_name: ClassVar[str] = RunEvent.CANCEL_REQUESTED

    reason: str = Field(Reason.USER_REQUESTED, description="Why the run should stop.")
    requested_by: str | None = Field(None, description="Person or service asking.")


class RunResult(BaseModel):
    """The runner's structured result."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    summary: str = Field("", description="What was done, in a few sentences.")
    branch: str | None = Field(None, description="Work branch.")
    commit_sha: str | None = Field(None, description="Last commit made.")
    pr_url: str | None = Field(None, description="Pull request opened.")
    diff_stat: str | None = Field(None, description="git diff --stat of the work.")
    files_changed: list[str] = Field(default_factory=list, description="Paths changed.")
    tests_passed: bool | None = Field(None, description="Outcome of the last test run.")
    details: dict[str, Any] = Field(default_factory=dict, description="Agent-specific output.")
    commits: list[str] = Field(default_factory=list, description="Commits made by the run.")
    pushed: bool | None = Field(None, description="Whether the branch was pushed.")
    acceptance: dict[str, Any] | None = Field(
        None, description="Acceptance test outcome: command, passed, output tail."
    )
    turns: int | None = Field(None, ge=0, description="Model turns the run took.")


class TerminalEvent(_RunEvent):
    """Base of the events that end a run; each carries a reason code."""

    status: ClassVar[str]

    reason: str = Field(..., description="Reason code (see Reason).")
    message: str = Field("", description="Human-readable detail.")
    tokens_in: int = Field(0, ge=0, description="Prompt tokens used by the run.")
    tokens_out: int = Field(0, ge=0, description="Completion tokens used by the run.")
    cost_usd: float = Field(0.0, ge=0, description="Total cost in USD.")


@register
class RunCompleted(TerminalEvent):
    event_name: ClassVar[str] = RunEvent.COMPLETED
    status: ClassVar[str] = RunStatus.COMPLETED

    reason: str = Field(Reason.SUCCEEDED, description="Reason code.")
    result: RunResult = Field(default_factory=RunResult, description="Structured result.")


@register
class RunFailed(TerminalEvent):
    event_name: ClassVar[str] = RunEvent.FAILED
    status: ClassVar[str] = RunStatus.FAILED

    detail: dict[str, Any] = Field(default_factory=dict, description="E.g. which budget.")


@register
class RunCancelled(TerminalEvent):
    event_name: ClassVar[str] = RunEvent.CANCELLED
    status: ClassVar[str] = RunStatus.CANCELLED

    reason: str = Field(Reason.USER_REQUESTED, description="Reason code.")
    cancelled_by: str | None = Field(None, description="Who asked.")


@register
class RunTimedOut(TerminalEvent):
    event_name: ClassVar[str] = RunEvent.TIMED_OUT
    status: ClassVar[str] = RunStatus.TIMED_OUT

    reason: str = Field(Reason.DEADLINE_EXCEEDED, description="Reason code.")
    limit_seconds: int | None = Field(None, description="The deadline that passed.")


@register
class RunLost(TerminalEvent):
    event_name: ClassVar[str] = RunEvent.LOST
    status: ClassVar[str] = RunStatus.LOST
