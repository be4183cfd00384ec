"""Parsing core's query bodies: the request models are the contract's
(`nexus_events.events.queries`); `parse_query` turns a raw body into one of them or a
`QueryError` (400) that names the offending field.
"""

from __future__ import annotations

from nexus_events.events.queries import (
    BIGINT_MAX,
    MAX_PAGE,
    AgentGet,
    BoardGet,
    CatalogHistory,
    EmptyQuery,
    FlowDefinitionGet,
    ProjectionRebuild,
    RunsEvents,
    RunsGet,
    RunsList,
    SkillGet,
    UsageSummary,
)
from nexus_events.transport.micro import one_line, parse_query

__all__ = [
    "BIGINT_MAX",
    "MAX_PAGE",
    "AgentGet",
    "BoardGet",
    "CatalogHistory",
    "EmptyQuery",
    "FlowDefinitionGet",
    "ProjectionRebuild",
    "RunsEvents",
    "RunsGet",
    "RunsList",
    "SkillGet",
    "UsageSummary",
    "one_line",
    "parse_query",
]
