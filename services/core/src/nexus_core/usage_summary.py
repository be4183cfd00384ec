"""The SQL of ``nexus.core.v1.usage.summary``: run totals grouped by one key of agent_runs."""

from __future__ import annotations

from nexus_events.events.queries import UsageBy, UsageSummary

# The group key of each `by`, as an SQL expression over agent_runs. A run's day is the UTC date
# it was requested (its latest event's when the projection never saw the request).
_KEYS: dict[UsageBy, str] = {
    UsageBy.DAY: "to_char(COALESCE(requested_at, last_event_at) AT TIME ZONE 'UTC', 'YYYY-MM-DD')",
    UsageBy.AGENT: "agent_id",
    UsageBy.FLOW: "flow",
    UsageBy.TASK: "task_id",
    UsageBy.ORIGIN: "origin",
}


def usage_sql(table: str, query: UsageSummary) -> tuple[str, list[object]]:
    """SELECT key, runs, tokens_in, tokens_out, cost_usd, turns over `table` (quoted), and its
    arguments: oldest day first by day, else costliest first (then key, for a stable order)."""
    where: list[str] = []
    args: list[object] = []
    when = "COALESCE(requested_at, last_event_at)"
    for column, value in (
        ("agent_id", query.agent_id),
        ("flow", query.flow),
        ("task_id", query.task_id),
    ):
        if value is not None:
            args.append(value)
            where.append(f"{column} = ${len(args)}")
    if query.since is not None:
        args.append(query.since)
        where.append(f"{when} >= ${len(args)}")
    if query.until is not None:
        args.append(query.until)
        where.append(f"{when} < ${len(args)}")
    order = "key" if query.by is UsageBy.DAY else "cost_usd DESC, key NULLS LAST"
    args.append(query.limit)
    # Only fixed expressions are interpolated (the key, the order, the quoted table); every
    # value the request carries is a bind parameter.
    sql = (
        f"SELECT {_KEYS[query.by]} AS key, count(*) AS runs,"  # noqa: S608
        " COALESCE(sum(tokens_in), 0)::bigint AS tokens_in,"
        " COALESCE(sum(tokens_out), 0)::bigint AS tokens_out,"
        " COALESCE(sum(cost_usd), 0)::float8 AS cost_usd,"
        " COALESCE(sum(turns), 0)::bigint AS turns"
        f" FROM {table}"
        + (" WHERE " + " AND ".join(where) if where else "")
        + f" GROUP BY 1 ORDER BY {order} LIMIT ${len(args)}"
    )
    return sql, args
