"""Bodies of core's request/reply queries (``nexus.core.v1.*``): requests, replies, errors.

They live in the contract, beside the subjects they travel on, so clients and the AsyncAPI
document see the same models core validates with. A request is a JSON object (an empty body
means ``{}``); unknown fields are errors, since people type these (``nats req``). Replies are
facts for readers: unknown fields are ignored, so core may add some.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from nexus_events.events.catalog import AgentDefinition, SkillDefinition

# Most rows one runs.list / runs.events reply carries.
MAX_PAGE = 500


class Query(BaseModel):
    """Base of query requests: frozen, unknown fields rejected with their name."""

    model_config = ConfigDict(frozen=True, extra="forbid")


class RunsGet(Query):
    """Body of a ``nexus.core.v1.runs.get`` request."""

    run_id: str = Field(..., min_length=1, description="The run to show.")


class RunsList(Query):
    """Body of a ``nexus.core.v1.runs.list`` request: filters and one page, newest first."""

    status: str | None = Field(None, description="Only runs in this status.")
    agent_id: str | None = Field(None, description="Only runs of this agent.")
    task_id: str | None = Field(None, description="Only runs of this task.")
    origin: str | None = Field(None, description="Only runs from this origin (cli, schedule...).")
    since: datetime | None = Field(None, description="Runs requested at or after this time.")
    limit: int = Field(50, gt=0, le=MAX_PAGE, description="Most runs in the reply.")
    cursor: str | None = Field(None, description="next_cursor of the previous page.")


class RunsEvents(Query):
    """Body of a ``nexus.core.v1.runs.events`` request: one run's events from the stream."""

    run_id: str = Field(..., min_length=1, description="The run whose events to read.")
    from_seq: int = Field(1, ge=1, description="Stream sequence to start at.")
    limit: int = Field(MAX_PAGE, gt=0, le=MAX_PAGE, description="Most events in the reply.")


class BoardGet(Query):
    """Body of a ``nexus.core.v1.board.get`` request."""

    column: str | None = Field(None, description="Only tasks in this board column.")
    include_deleted: bool = Field(False, description="Also show deleted tasks.")


class AgentGet(Query):
    """Body of a ``nexus.core.v1.catalog.agents.get`` request."""

    id: str = Field(..., min_length=1, description="Agent id.")


class SkillGet(Query):
    """Body of a ``nexus.core.v1.catalog.skills.get`` request."""

    name: str = Field(..., min_length=1, description="Skill name.")
    version: str | None = Field(None, description="Skill version; the latest if absent.")


class EmptyQuery(Query):
    """Body of a query that takes no parameters (``{}`` or nothing)."""


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


class BoardTask(Reply):
    task_id: str = Field(..., description="Task id.")
    title: str | None = Field(..., description="Title.")
    column: str = Field(..., description="Board column.")
    labels: list[str] = Field(..., description="Labels.")
    deleted: bool = Field(..., description="Deleted tasks are shown only on request.")
    current_run: BoardRun | None = Field(..., description="The task's current run.")
    past_runs: list[BoardRun] = Field(..., description="Its earlier runs.")
    updated_at: datetime | None = Field(..., description="Last change.")


class BoardGetReply(Reply):
    tasks: list[BoardTask] = Field(..., description="Tasks by id.")


class AgentView(Reply):
    revision: int = Field(..., description="Catalog revision.")
    definition: AgentDefinition = Field(..., description="The agent definition.")


class AgentsListReply(Reply):
    agents: list[AgentView] = Field(..., description="Every agent.")


class SkillView(Reply):
    revision: int = Field(..., description="Catalog revision.")
    skill: SkillDefinition = Field(..., description="The skill.")


class SkillsListReply(Reply):
    skills: list[SkillView] = Field(..., description="Every skill version.")


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
    QueryErrorReply,
)
