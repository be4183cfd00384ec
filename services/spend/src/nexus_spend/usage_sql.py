"""The SQL of a usage report: the runs of the filters grouped by one key, and their total."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from nexus_events.events.spend import UsageGroup, UsageLine, UsageQuery

# Each group's key as text (None: runs without one).
_KEYS: dict[UsageGroup, str] = {
    UsageGroup.RUN: "run_id",
    UsageGroup.TASK: "task_id",
    UsageGroup.FLOW_RUN: "flow_run_id",
    UsageGroup.FLOW: "flow",
    UsageGroup.AGENT: "agent_id",
    UsageGroup.AGENT_REVISION: "agent_id || '@' || agent_revision",
    UsageGroup.MODEL: "model",
    UsageGroup.TEAM: "team",
    UsageGroup.ORIGIN: "origin",
    UsageGroup.DAY: "day::text",
}

_TOTALS = """count(*) AS runs, COALESCE(sum(calls), 0) AS turns,
    COALESCE(sum(tokens_in), 0) AS tokens_in, COALESCE(sum(tokens_out), 0) AS tokens_out,
    COALESCE(sum(cost_usd), 0) AS cost_usd,
    COALESCE(sum(wall_seconds) FILTER (WHERE ended_at IS NOT NULL), 0) AS wall_seconds"""


def where(query: UsageQuery) -> tuple[str, list[Any]]:
    """The filters as a WHERE clause and its arguments ($1...). A run's time is when it was
    requested, else (a run seen only by its calls) its day."""
    clauses: list[str] = []
    args: list[Any] = []
    when = "COALESCE(requested_at, day::timestamp AT TIME ZONE 'UTC')"
    if query.since is not None:
        args.append(query.since)
        clauses.append(f"{when} >= ${len(args)}")
    if query.until is not None:
        args.append(query.until)
        clauses.append(f"{when} < ${len(args)}")
    for column, value in (
        ("team", query.team),
        ("agent_id", query.agent_id),
        ("flow", query.flow),
        ("task_id", query.task_id),
    ):
        if value is not None:
            args.append(value)
            clauses.append(f"{column} = ${len(args)}")
    return (" WHERE " + " AND ".join(clauses)) if clauses else "", args


def grouped(q: str, query: UsageQuery) -> tuple[str, list[Any]]:
    """Rows by the group key: by day oldest first, else costliest first (then by key)."""
    filters, args = where(query)
    key = _KEYS[query.by]
    order = "key ASC NULLS LAST" if query.by is UsageGroup.DAY else "cost_usd DESC, key"
    args.append(query.limit)
    sql = (
        f"SELECT {key} AS key, {_TOTALS} FROM {q}.runs{filters}"
        f" GROUP BY 1 ORDER BY {order} LIMIT ${len(args)}"
    )
    return sql, args


def total(q: str, query: UsageQuery) -> tuple[str, list[Any]]:
    filters, args = where(query)
    return f"SELECT NULL::text AS key, {_TOTALS} FROM {q}.runs{filters}", args


def line(row: Mapping[str, Any]) -> UsageLine:
    return UsageLine(
        key=row["key"],
        runs=int(row["runs"]),
        turns=int(row["turns"]),
        tokens_in=int(row["tokens_in"]),
        tokens_out=int(row["tokens_out"]),
        cost_usd=float(row["cost_usd"]),
        wall_seconds=float(row["wall_seconds"]),
    )
