"""Parsing core's query bodies: the request models are the contract's
(`nexus_events.events.queries`); `parse_query` turns a raw body into one of them or a
`QueryError` (400) that names the offending field.
"""

from __future__ import annotations

from typing import TypeVar

from nexus_events.events.queries import (
    BIGINT_MAX,
    MAX_PAGE,
    AgentGet,
    BoardGet,
    EmptyQuery,
    Query,
    RunsEvents,
    RunsGet,
    RunsList,
    SkillGet,
)
from pydantic import ValidationError

from nexus_core.errors import QueryError

__all__ = [
    "BIGINT_MAX",
    "MAX_PAGE",
    "AgentGet",
    "BoardGet",
    "EmptyQuery",
    "Q",
    "RunsEvents",
    "RunsGet",
    "RunsList",
    "SkillGet",
    "one_line",
    "parse_query",
]

Q = TypeVar("Q", bound=Query)


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
