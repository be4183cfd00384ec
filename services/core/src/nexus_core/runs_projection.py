"""The `agent_runs` projection: one row per run, following NEXUS_RUNS (schema core_agent_runs).

Each batch loads the rows of the runs it touches, folds the events into them in place
(`run_state.fold`), and upserts the rows (typed columns for queries plus the whole row as
JSONB for the next fold), in the runner's transaction with the checkpoint.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from nexus_events import subjects
from nexus_events.codec import Decoded
from nexus_events.projection import Source, quote_ident
from nexus_events.streams import RUNS

from nexus_core.migrations import Conn, migrate
from nexus_core.run_state import RunFact, RunRow, fold
from nexus_core.tracing import AGENT_ID, TASK_ID, spans_for

RUNS_SCHEMA = "core_agent_runs"

MIGRATIONS = (
    """
    CREATE TABLE {schema}.agent_runs (
        run_id text PRIMARY KEY,
        status text,
        reason text,
        agent_id text,
        task_id text,
        origin text,
        attempt int NOT NULL,
        runtime text,
        runtime_handle text,
        catalog_revisions jsonb NOT NULL,
        requested_at timestamptz,
        prepared_at timestamptz,
        queued_at timestamptz,
        dispatched_at timestamptz,
        started_at timestamptz,
        ended_at timestamptz,
        last_event_at timestamptz,
        tokens_in bigint NOT NULL,
        tokens_out bigint NOT NULL,
        cost_usd double precision NOT NULL,
        result_summary text,
        first_seq bigint NOT NULL,
        last_seq bigint NOT NULL,
        doc jsonb NOT NULL);
    CREATE INDEX ON {schema}.agent_runs (first_seq);
    CREATE INDEX ON {schema}.agent_runs (status, first_seq);
    CREATE INDEX ON {schema}.agent_runs (agent_id, first_seq);
    CREATE INDEX ON {schema}.agent_runs (task_id, first_seq);
    """,
)

# (column, PostgreSQL type): rows are written with one `INSERT ... SELECT FROM unnest(...)`
# per batch, one array parameter per column.
COLUMNS = (
    ("run_id", "text"), ("status", "text"), ("reason", "text"), ("agent_id", "text"),
    ("task_id", "text"), ("origin", "text"), ("attempt", "int"), ("runtime", "text"),
    ("runtime_handle", "text"), ("catalog_revisions", "jsonb"), ("requested_at", "timestamptz"),
    ("prepared_at", "timestamptz"), ("queued_at", "timestamptz"),
    ("dispatched_at", "timestamptz"), ("started_at", "timestamptz"),
    ("ended_at", "timestamptz"), ("last_event_at", "timestamptz"), ("tokens_in", "bigint"),
    ("tokens_out", "bigint"), ("cost_usd", "float8"), ("result_summary", "text"),
    ("first_seq", "bigint"), ("last_seq", "bigint"), ("doc", "jsonb"),
)  # fmt: skip


def upsert_sql(schema: str) -> str:
    names = ", ".join(name for name, _ in COLUMNS)
    arrays = ", ".join(f"${i}::{kind}[]" for i, (_, kind) in enumerate(COLUMNS, start=1))
    updates = ", ".join(f"{name} = EXCLUDED.{name}" for name, _ in COLUMNS[1:])
    return (
        f"INSERT INTO {quote_ident(schema)}.agent_runs ({names})"
        f" SELECT * FROM unnest({arrays}) ON CONFLICT (run_id) DO UPDATE SET {updates}"
    )


def to_fact(d: Decoded) -> RunFact | None:
    """The fact of a decoded run event; None for the `new` token (core re-publishes those)."""
    run_id = d.address.run_id
    if run_id is None or run_id == subjects.NEW_RUN_TOKEN or d.address.event is None:
        return None
    return RunFact(
        run_id, d.address.event, d.envelope.stream_seq or 0, d.envelope.timestamp, d.event
    )


def row_values(row: RunRow) -> tuple[Any, ...]:
    summary = (row.result or {}).get("summary")
    return (
        row.run_id, row.status, row.reason, row.agent_id, row.task_id, row.origin, row.attempt,
        row.runtime, row.runtime_handle, json.dumps(row.catalog_revisions),
        row.phases.get("requested"), row.phases.get("prepared"), row.phases.get("queued"),
        row.phases.get("dispatched"), row.phases.get("started"), row.ended_at, row.last_event_at,
        row.tokens_in, row.tokens_out, row.cost_usd, summary, row.first_seq or 0, row.last_seq,
        row.to_json(),
    )  # fmt: skip


class AgentRunsProjection:
    name = "agent_runs"
    sources: tuple[Source, ...] = (Source(RUNS),)

    def __init__(self, schema: str = RUNS_SCHEMA) -> None:
        self.schema = schema

    async def create(self, conn: Conn, schema: str) -> None:
        await migrate(conn, schema, MIGRATIONS)

    async def apply(self, conn: Conn, schema: str, batch: Sequence[Decoded]) -> None:
        pairs = [(d, f) for d in batch if (f := to_fact(d)) is not None]
        if not pairs:
            return
        ids = sorted({f.run_id for _, f in pairs})  # sorted: concurrent writers lock in one order
        # Rows are loaded once per batch and folded in place: they belong to this batch.
        rows: dict[str, RunRow] = {
            r["run_id"]: RunRow.from_json(r["doc"])
            for r in await conn.fetch(
                f"SELECT run_id, doc FROM {quote_ident(schema)}.agent_runs"
                " WHERE run_id = ANY($1::text[]) ORDER BY run_id FOR UPDATE",
                ids,
            )
        }
        spans = spans_for("core project agent_runs")
        for d, fact in pairs:
            with spans(d) as span:
                row = rows.get(fact.run_id)
                if row is None:
                    row = rows[fact.run_id] = RunRow(run_id=fact.run_id)
                fold(row, fact)
                if span is not None:
                    span.set_attribute(AGENT_ID, row.agent_id or "")
                    span.set_attribute(TASK_ID, row.task_id or "")
                    span.set_attribute("nexus.run.status", row.status or "")
        columns = zip(*(row_values(rows[i]) for i in ids), strict=True)
        await conn.execute(upsert_sql(schema), *columns)
