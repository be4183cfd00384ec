"""Bodies of core's request/reply queries (``nexus.core.v1.*``): requests, replies, errors.

They live in the contract, beside the subjects they travel on, so clients and the AsyncAPI
document see the same models core validates with. A request is a JSON object (an empty body
means ``{}``); unknown fields are errors, since people type these (``nats req``). Replies are
facts for readers: unknown fields are ignored, so core may add some.

Requests are validated so that nothing PostgreSQL or JetStream would refuse (NUL bytes,
numbers past bigint, out-of-range timestamps, megabyte ids) gets past the boundary.
"""

from __future__ import annotations

from datetime import UTC, datetime
from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field
from pydantic_core import PydanticCustomError

from nexus_events.contract import subjects
from nexus_events.contract.runstate import RunStatus
from nexus_events.events.catalog import AgentDefinition, SkillDefinition
from nexus_events.events.flows import FlowDefinition
from nexus_events.events.runs import Origin
from nexus_events.events.tasks import Column

# Most rows one runs.list / runs.events reply carries: a page a person can read and a reply
# far below NATS' default 1 MB max_payload.
MAX_PAGE = 500
# PostgreSQL bigint, the type of every sequence column; JetStream's uint64 sequences beyond it
# never occur in practice (2**63 messages).
BIGINT_MAX = 2**63 - 1
# Longest free-text filter (agent id, task id, skill version): ids are at most 128 characters
# (subject tokens), so twice that leaves room without letting a request carry megabytes.
MAX_TEXT = 256
# Run, agent and skill ids are subject tokens; the length is checked before the pattern so a
# megabyte id gets a short message.
ID_MAX = 128
ID_REGEX = f"^{subjects.TOKEN_PATTERN.pattern}$"
# A cursor is a first_seq: ASCII digits only (int() would also take "٣", "1_0" and " 7 ").
CURSOR_REGEX = r"^[0-9]{1,19}$"


def _storable(value: str) -> str:
    # PostgreSQL text cannot hold NUL. (Lone surrogates, which UTF-8 cannot hold either, never
    # get here: pydantic refuses them in JSON and in Python input alike.)
    if "\x00" in value:
        raise PydanticCustomError("nul_character", "must not contain NUL (\\u0000) characters")
    return value


def _bigint_cursor(value: str) -> str:
    if int(value) > BIGINT_MAX:
        raise PydanticCustomError("cursor_range", f"must be at most {BIGINT_MAX}")
    return value


def _timestamptz(value: datetime) -> datetime:
    # Naive means UTC, the zone of every time a query answers with. An offset can push a
    # datetime Python accepts past year 1 or 9999 once made UTC, which asyncpg cannot encode.
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    try:
        return value.astimezone(UTC)
    except OverflowError:
        raise PydanticCustomError(
            "datetime_range", "must lie between years 1 and 9999 once converted to UTC"
        ) from None


Token = Annotated[
    str, Field(min_length=1, max_length=ID_MAX, pattern=ID_REGEX), AfterValidator(_storable)
]
Text = Annotated[str, Field(min_length=1, max_length=MAX_TEXT), AfterValidator(_storable)]
Cursor = Annotated[str, Field(pattern=CURSOR_REGEX), AfterValidator(_bigint_cursor)]
Since = Annotated[datetime, AfterValidator(_timestamptz)]


class Query(BaseModel):
    """Base of query requests: people type them (`nats req`), so unknown fields are errors."""

    model_config = ConfigDict(frozen=True, extra="forbid")


class RunsGet(Query):
    """Body of a ``nexus.core.v1.runs.get`` request."""

    run_id: Token = Field(..., description="Run id (a subject token, at most 128 characters).")


class RunsList(Query):
    """Body of a ``nexus.core.v1.runs.list`` request: filters and one page, newest first."""

    status: RunStatus | None = Field(None, description="Only runs in this status.")
    agent_id: Text | None = Field(None, description="Only runs of this agent.")
    task_id: Text | None = Field(None, description="Only runs for this task.")
    origin: Origin | None = Field(None, description="Only runs requested from here.")
    since: Since | None = Field(
        None, description="Runs requested at or after this time (naive means UTC)."
    )
    flow: Token | None = Field(
        None, description="Only runs a flow of this id started (their `flow` label)."
    )
    flow_run_id: Token | None = Field(
        None, description="Only runs this flow run started (their `flow_run_id` label)."
    )
    text: Text | None = Field(
        None,
        description="Case-insensitive substring of run_id, agent_id, task_id, input or"
        " requested_by (`%` and `_` match themselves).",
    )
    golden: bool | None = Field(
        None, description="Only runs marked golden (true) or only runs not marked (false)."
    )
    limit: int = Field(50, ge=1, le=MAX_PAGE, description=f"Page size, 1..{MAX_PAGE}.")
    cursor: Cursor | None = Field(None, description="next_cursor of the previous page.")


class RunsEvents(Query):
    """Body of a ``nexus.core.v1.runs.events`` request: one run's events from the stream."""

    run_id: Token = Field(..., description="Run id (a subject token, at most 128 characters).")
    from_seq: int = Field(
        1, ge=1, le=BIGINT_MAX, description=f"Stream sequence to start at, 1..{BIGINT_MAX}."
    )
    limit: int = Field(MAX_PAGE, ge=1, le=MAX_PAGE, description=f"Most events, 1..{MAX_PAGE}.")


class BoardGet(Query):
    """Body of a ``nexus.core.v1.board.get`` request."""

    column: Column | None = Field(None, description="Only tasks in this column.")
    include_deleted: bool = Field(False, description="Also list deleted tasks.")


class AgentGet(Query):
    """Body of a ``nexus.core.v1.catalog.agents.get`` request."""

    id: Token = Field(..., description="Agent id.")
    revision: int | None = Field(
        None,
        ge=1,
        le=BIGINT_MAX,
        description="Catalog revision (even one deleted since); the current one when absent.",
    )


class SkillGet(Query):
    """Body of a ``nexus.core.v1.catalog.skills.get`` request."""

    name: Token = Field(..., description="Skill name.")
    version: Text | None = Field(None, description="Version label; the latest when absent.")


class FlowDefinitionGet(Query):
    """Body of a ``nexus.core.v1.catalog.flows.get`` request."""

    id: Token = Field(..., description="Flow id.")
    revision: int | None = Field(
        None, ge=1, le=BIGINT_MAX, description="Catalog revision; the latest when absent."
    )


class CatalogKind(StrEnum):
    """The kinds of catalog item, each with its own revision history."""

    AGENT = "agent"
    SKILL = "skill"
    FLOW = "flow"


class CatalogHistory(Query):
    """Body of a ``nexus.core.v1.catalog.history`` request: every revision of one item."""

    kind: CatalogKind = Field(..., description="agent, skill or flow.")
    id: Token = Field(..., description="Agent id, skill name or flow id.")


class UsageBy(StrEnum):
    """What a usage summary groups runs by."""

    DAY = "day"
    AGENT = "agent"
    FLOW = "flow"
    TASK = "task"
    ORIGIN = "origin"


# Most rows of one usage summary: more days than a year, far below max_payload.
MAX_USAGE_ROWS = 1000


class UsageSummary(Query):
    """Body of a ``nexus.core.v1.usage.summary`` request: run totals grouped by one key."""

    by: UsageBy = Field(..., description="Group by day (UTC date requested), agent, flow...")
    since: Since | None = Field(
        None, description="Runs requested at or after this time (naive means UTC)."
    )
    until: Since | None = Field(
        None, description="Runs requested before this time (naive means UTC)."
    )
    agent_id: Text | None = Field(None, description="Only runs of this agent.")
    flow: Token | None = Field(None, description="Only runs a flow of this id started.")
    task_id: Text | None = Field(None, description="Only runs for this task.")
    limit: int = Field(100, ge=1, le=MAX_USAGE_ROWS, description=f"Most rows, 1..{MAX_USAGE_ROWS}.")


class EmptyQuery(Query):
    """Body of a query that takes no parameters (``{}`` or nothing)."""


class ProjectionName(StrEnum):
    """Core's projections (read models of NEXUS_RUNS and NEXUS_TASKS)."""

    AGENT_RUNS = "agent_runs"
    BOARD = "board"


class ProjectionRebuild(Query):
    """Body of a ``nexus.core.v1.projections.rebuild`` request."""

    projection: ProjectionName = Field(..., description="Which projection to rebuild.")


class Reply(BaseModel):
    """Base of query replies."""

    model_config = ConfigDict(frozen=True, extra="ignore")


class RunView(Reply):
    """A run as the agent_runs projection shows it (nexus_core.queries.run_view)."""

    run_id: str = Field(..., description="Run id.")
    status: str | None = Field(..., description="Run status (RunStatus), None before any.")
    reason: str | None = Field(..., description="Reason code of a terminal status.")
    message: str | None = Field(..., description="Detail of the terminal status.")
    agent_id: str | None = Field(..., description="Agent that runs.")
    task_id: str | None = Field(..., description="Task it works on.")
    origin: str | None = Field(..., description="Where the request came from.")
    input: str | None = Field(..., description="What the run was asked to do.")
    requested_by: str | None = Field(..., description="Who asked.")
    parent_run_id: str | None = Field(..., description="Delegating run.")
    attempt: int = Field(..., description="Attempt number.")
    max_attempts: int | None = Field(
        None, description="Attempts it may have (its config's resume.max_attempts); None = unknown."
    )
    condensations: int = Field(
        0, description="Times the conversation was condensed to fit the context budget."
    )
    runtime: str | None = Field(..., description="Runtime that runs it (kubernetes, local).")
    runtime_handle: str | None = Field(..., description="Job name or process id.")
    queue_position: int | None = Field(..., description="Position while queued.")
    catalog_revisions: dict[str, int] = Field(..., description="Catalog revisions it used.")
    phases: dict[str, datetime] = Field(..., description="When it entered each status.")
    ended_at: datetime | None = Field(..., description="When it ended.")
    last_event_at: datetime | None = Field(..., description="Time of its latest event.")
    turns: int = Field(..., description="Model turns so far.")
    tokens_in: int = Field(..., description="Prompt tokens.")
    tokens_out: int = Field(..., description="Completion tokens.")
    cost_usd: float = Field(..., description="Cost in USD.")
    result: dict[str, Any] | None = Field(..., description="The RunResult of a completed run.")
    last_seq: int = Field(..., description="Stream sequence of its latest event.")
    labels: dict[str, str] = Field(
        default_factory=dict,
        description="Labels of its request; a flow's runs carry flow, flow_run_id, step, round.",
    )
    replay_of: str | None = Field(None, description="The run it replays (docs/lab.md).")
    forked_from: str | None = Field(None, description="The run it forks.")
    fork_turn: int | None = Field(None, description="The source turn a fork goes on from.")
    forks: list[str] = Field(
        default_factory=list, description="Runs forked or replayed from it, oldest first."
    )
    golden: bool = Field(False, description="Marked golden: an eval case (docs/lab.md).")
    diverged_at: int | None = Field(
        None, description="A replay's first divergence: the turn (None: none seen)."
    )
    divergence: str | None = Field(None, description="What differed first (DivergenceKind).")
    canary_arm: str | None = Field(
        None, description="The canary arm it was assembled with: candidate or current."
    )
    team: str | None = Field(None, description="The team it counts against (docs/spend.md).")
    budget_wait: str | None = Field(
        None,
        description="Why it waits on a budget (queued behind one, or paused on an ask);"
        " None when it does not.",
    )
    sleeping_until: datetime | None = Field(
        None, description="A sleeping run's wake time (docs/resume.md, Sleep); None otherwise."
    )
    sleep_reason: str | None = Field(
        None, description="Why a sleeping run sleeps (its agent's words); None otherwise."
    )


class RunsListReply(Reply):
    runs: list[RunView] = Field(..., description="Runs, newest first.")
    next_cursor: str | None = Field(..., description="Cursor of the next page; None at the end.")


class RunEventView(Reply):
    seq: int | None = Field(..., description="Stream sequence.")
    event: str | None = Field(..., description="Event name.")
    time: datetime | None = Field(..., description="When JetStream stored it.")
    event_id: str = Field(..., description="Nats-Msg-Id.")
    source: str = Field(..., description="Nexus-Source.")
    body: dict[str, Any] = Field(..., description="The event's JSON.")


class RunsEventsReply(Reply):
    run_id: str = Field(..., description="The run.")
    events: list[RunEventView] = Field(..., description="Its events in stream order.")


class BoardRun(Reply):
    run_id: str = Field(..., description="Run id.")
    status: str | None = Field(..., description="Its status.")
    attempt: int | None = Field(
        None, description="Its attempt (2+ after a resume, docs/resume.md); None = not known yet."
    )


class BoardChildRun(BoardRun):
    """A run delegated by one of the task's runs (or by another child): shown under the task,
    never its current run."""

    agent_id: str | None = Field(..., description="Agent the run was delegated to.")
    parent_run_id: str = Field(..., description="The run that delegated it.")


class BoardTask(Reply):
    task_id: str = Field(..., description="Task id.")
    title: str | None = Field(..., description="Title.")
    column: str = Field(..., description="Board column.")
    labels: list[str] = Field(..., description="Labels.")
    deleted: bool = Field(..., description="Deleted tasks are shown only on request.")
    current_run: BoardRun | None = Field(..., description="The task's current run.")
    past_runs: list[BoardRun] = Field(..., description="Its earlier runs.")
    child_runs: list[BoardChildRun] = Field(
        default_factory=list,
        description="Runs its runs delegated (any depth), oldest first; they move no column.",
    )
    updated_at: datetime | None = Field(..., description="Last change.")


class BoardGetReply(Reply):
    tasks: list[BoardTask] = Field(..., description="Tasks by id.")


class CanaryArmView(Reply):
    """One arm of an agent's canary, from its finished runs."""

    revision: int = Field(..., description="The arm's agent revision.")
    runs: int = Field(0, description="Finished runs.")
    succeeded: int = Field(0, description="Runs that completed.")
    success_rate: float = Field(0.0, description="succeeded / runs.")
    mean_cost_usd: float = Field(0.0, description="Mean cost per run.")
    mean_turns: float = Field(0.0, description="Mean model turns per run.")


class CanaryView(Reply):
    """An agent's canary as it stands: each arm's outcomes and the last decision."""

    candidate: CanaryArmView = Field(..., description="The candidate arm.")
    current: CanaryArmView = Field(..., description="The current arm.")
    share: float = Field(..., description="The candidate's share of runs.")
    decision: str | None = Field(
        None, description="promote or rollback once decided; None while it runs."
    )
    rule: str | None = Field(None, description="The policy condition that decided.")


class AgentView(Reply):
    revision: int = Field(..., description="Catalog revision.")
    definition: AgentDefinition = Field(..., description="The agent definition.")
    canary: CanaryView | None = Field(
        None, description="Its canary's standing, when it names one (docs/lab.md)."
    )


class AgentsListReply(Reply):
    agents: list[AgentView] = Field(..., description="Every agent.")


class FlowDefinitionView(Reply):
    """One revision of a flow definition."""

    revision: int = Field(..., description="Catalog revision.")
    definition: FlowDefinition = Field(..., description="The flow definition.")


class FlowDefinitionsListReply(Reply):
    """Every flow definition."""

    flows: list[FlowDefinitionView] = Field(..., description="Every flow, latest revision.")


class CatalogRevisionView(Reply):
    """One revision of a catalog item."""

    revision: int = Field(..., description="Catalog revision.")
    deleted: bool = Field(..., description="Whether this revision deletes the item.")
    definition: dict[str, Any] | None = Field(
        ..., description="The definition (agent, skill or flow); None for a delete."
    )


class CatalogHistoryReply(Reply):
    """Every revision of one catalog item, oldest first (empty: never applied)."""

    kind: str = Field(..., description="agent, skill or flow.")
    id: str = Field(..., description="The item.")
    revisions: list[CatalogRevisionView] = Field(..., description="Oldest first.")


class UsageRow(Reply):
    """Totals of the runs sharing one key."""

    key: str | None = Field(
        ..., description="The day (YYYY-MM-DD), agent, flow, task or origin; None: runs without."
    )
    runs: int = Field(..., description="Runs.")
    tokens_in: int = Field(..., description="Prompt tokens.")
    tokens_out: int = Field(..., description="Completion tokens.")
    cost_usd: float = Field(..., description="Cost in USD.")
    turns: int = Field(..., description="Model turns.")


class UsageSummaryReply(Reply):
    by: str = Field(..., description="What the rows are grouped by.")
    rows: list[UsageRow] = Field(
        ..., description="By day: oldest first; otherwise costliest first."
    )


class SkillView(Reply):
    revision: int = Field(..., description="Catalog revision.")
    skill: SkillDefinition = Field(..., description="The skill.")


class SkillsListReply(Reply):
    skills: list[SkillView] = Field(..., description="Every skill version.")


class ProjectionPosition(Reply):
    projection: str = Field(..., description="Projection name.")
    stream: str = Field(..., description="A stream it reads.")
    checkpoint: int = Field(..., description="Last stream sequence applied.")
    stream_last_seq: int = Field(..., description="Last sequence in the stream.")
    behind: int = Field(..., description="Stream messages not applied yet.")


class LeadershipView(Reply):
    """The answering replica's part in a service that may run several (one leads by a lease)."""

    role: Literal["leader", "standby"] = Field(
        ...,
        description="leader: holds the lease and runs the projections; standby: answers"
        " queries and takes the lease over when it is free.",
    )
    replica: str = Field(..., description="This replica's id in the lease (host/pid/suffix).")
    holder: str | None = Field(
        None, description="Who holds the lease as this replica last saw it (None: free)."
    )
    lease_bucket: str = Field(..., description="JetStream KV bucket of the lease.")


class ProjectionsStatusReply(Reply):
    projections: list[ProjectionPosition] = Field(..., description="Per projection and stream.")
    leadership: LeadershipView | None = Field(
        None, description="The answering replica's role (any replica may answer)."
    )


class ProjectionRebuildReply(Reply):
    projection: str = Field(..., description="The projection rebuilt.")
    applied: int = Field(..., description="Events replayed into the fresh tables.")
    seconds: float = Field(..., description="How long the rebuild took.")


class FieldError(BaseModel):
    """One invalid request field."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    loc: str = Field(..., description="Dotted path of the field, `(body)` for the whole body.")
    msg: str = Field(..., description="What is wrong with it.")


class QueryErrorDetail(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")

    code: int = Field(..., description="HTTP-like status: 400 invalid request, 404 not found.")
    message: str = Field(..., description="One line for people.")
    fields: list[FieldError] = Field(default_factory=list, description="Invalid fields, if any.")


class QueryErrorReply(BaseModel):
    """Error reply of a query (nats.micro error: header ``Nats-Service-Error-Code`` too)."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    error: QueryErrorDetail = Field(..., description="What went wrong.")


# Every request and reply model of core's queries (for schema snapshots and docs).
REQUESTS: tuple[type[Query], ...] = (
    RunsGet,
    RunsList,
    RunsEvents,
    BoardGet,
    AgentGet,
    SkillGet,
    EmptyQuery,
    ProjectionRebuild,
    CatalogHistory,
    UsageSummary,
)
REPLIES: tuple[type[BaseModel], ...] = (
    RunView,
    RunsListReply,
    RunsEventsReply,
    BoardGetReply,
    AgentView,
    AgentsListReply,
    SkillView,
    SkillsListReply,
    ProjectionsStatusReply,
    ProjectionRebuildReply,
    CatalogHistoryReply,
    UsageSummaryReply,
    QueryErrorReply,
)
