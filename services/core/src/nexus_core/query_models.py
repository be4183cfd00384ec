"""Request bodies of core's queries, validated at the boundary so that nothing PostgreSQL or
JetStream would refuse (NUL bytes, numbers past bigint, out-of-range timestamps) gets that far.

Every model forbids unknown fields; `parse_query` turns a raw body into a model or a
`QueryError` (400) that names the offending field.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, TypeVar

from nexus_events import subjects
from nexus_events.events import Column, Origin
from nexus_events.runstate import RunStatus
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError
from pydantic_core import PydanticCustomError

from nexus_core.errors import QueryError

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


class QueryModel(BaseModel):
    """Base of query bodies: people type them (`nats req`), so unknown fields are errors."""

    model_config = ConfigDict(frozen=True, extra="forbid")


class RunsGet(QueryModel):
    run_id: Token = Field(..., description="Run id (a subject token, at most 128 characters).")


class RunsList(QueryModel):
    status: RunStatus | None = Field(None, description="Only runs in this status.")
    agent_id: Text | None = Field(None, description="Only runs of this agent.")
    task_id: Text | None = Field(None, description="Only runs for this task.")
    origin: Origin | None = Field(None, description="Only runs requested from here.")
    since: Since | None = Field(
        None, description="Runs requested at or after this time (naive means UTC)."
    )
    limit: int = Field(50, ge=1, le=MAX_PAGE, description=f"Page size, 1..{MAX_PAGE}.")
    cursor: Cursor | None = Field(None, description="next_cursor of the previous page.")


class RunsEvents(QueryModel):
    run_id: Token = Field(..., description="Run id (a subject token, at most 128 characters).")
    from_seq: int = Field(
        1, ge=1, le=BIGINT_MAX, description=f"Stream sequence to start at, 1..{BIGINT_MAX}."
    )
    limit: int = Field(MAX_PAGE, ge=1, le=MAX_PAGE, description=f"Most events, 1..{MAX_PAGE}.")


class BoardGet(QueryModel):
    column: Column | None = Field(None, description="Only tasks in this column.")
    include_deleted: bool = Field(False, description="Also list deleted tasks.")


class AgentGet(QueryModel):
    id: Token = Field(..., description="Agent id.")


class SkillGet(QueryModel):
    name: Token = Field(..., description="Skill name.")
    version: Text | None = Field(None, description="Version label; the latest when absent.")


class NoArguments(QueryModel):
    """The body of a query that takes none: ``{}`` or empty."""


Q = TypeVar("Q", bound=QueryModel)


def parse_query(model: type[Q], data: bytes) -> Q:
    """Validate a request body (empty means ``{}``) as `model`.

    Raises `QueryError` (400) whose message names the first bad field and whose `fields` list
    every problem; invalid JSON, invalid UTF-8 and non-object bodies are problems of ``(body)``.
    """
    try:
        return model.model_validate_json(data.strip() or b"{}")
    except ValidationError as exc:
        fields = [
            {"loc": ".".join(str(p) for p in e["loc"]) or "(body)", "msg": one_line(e["msg"])}
            for e in exc.errors(include_url=False, include_input=False)
        ]
    first = fields[0]
    more = f" (and {len(fields) - 1} more)" if len(fields) > 1 else ""
    raise QueryError(400, f"invalid request: {first['loc']}: {first['msg']}{more}", fields)


def one_line(text: str) -> str:
    """`text` with every run of whitespace or control characters made one space, so that it
    fits a NATS header and a terminal line."""
    return " ".join("".join(c if c.isprintable() else " " for c in text).split())
