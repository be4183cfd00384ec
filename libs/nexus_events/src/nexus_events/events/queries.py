"""Request bodies of core's request/reply queries (``nexus.core.v1.*``) and their error reply.

They live in the contract, beside the subjects they travel on, so clients and the AsyncAPI
document see the same models core validates with. A request is a JSON object (an empty body
means ``{}``); unknown fields are errors, since people type these (``nats req``).
"""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field

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
