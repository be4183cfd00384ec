"""The `agent_runs` projection: one row per run, following NEXUS_RUNS (schema core_agent_runs).

Each batch loads the rows of the runs it touches, folds the events into them in place
(`run_state.fold`), and upserts the rows (typed columns for queries plus the whole row as
JSONB for the next fold), in the runner's transaction with the checkpoint.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable, Sequence

from nexus_events.contract import subjects
from nexus_events.contract.codec import Decoded
from nexus_events.contract.runstate import TERMINAL_EVENTS
from nexus_events.contract.streams import RUNS
from nexus_events.events.lab import RunGoldenMarked
from nexus_events.transport.projection import Source, quote_ident

from nexus_core.migrations import Conn, migrate
from nexus_core.run_state import PHASES, RunFact, RunRow, fold
from nexus_core.tracing import AGENT_ID, TASK_ID, spans_for

log = logging.getLogger(__name__)

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
    # Resume (docs/resume.md): how often the conversation was condensed. Rows written before
    # this count none until their next event rewrites them from the document.
    """
    ALTER TABLE {schema}.agent_runs ADD COLUMN condensations int NOT NULL DEFAULT 0;
    """,
    # The console (issue 38): runs.list filters by flow, flow run and free text, and
    # usage.summary sums turns per group. input, requested_by and turns are in every stored
    # document already; labels only in those folded since, so older rows get theirs from a
    # rebuild (`nexus projections rebuild agent_runs`) or from their run's next event.
    """
    ALTER TABLE {schema}.agent_runs
        ADD COLUMN input text,
        ADD COLUMN requested_by text,
        ADD COLUMN labels jsonb NOT NULL DEFAULT '{{}}'::jsonb,
        ADD COLUMN flow text,
        ADD COLUMN flow_run_id text,
        ADD COLUMN turns int NOT NULL DEFAULT 0;
    UPDATE {schema}.agent_runs SET
        input = doc->>'input',
        requested_by = doc->>'requested_by',
        labels = COALESCE(doc->'labels', '{{}}'::jsonb),
        flow = doc->'labels'->>'flow',
        flow_run_id = doc->'labels'->>'flow_run_id',
        turns = COALESCE(
            (SELECT max(k::int) FROM jsonb_object_keys(doc->'turns') AS k), 0);
    CREATE INDEX ON {schema}.agent_runs (flow, first_seq);
    CREATE INDEX ON {schema}.agent_runs (flow_run_id, first_seq);
    """,
    # The lab (issue 39): runs.list filters golden runs, and a run's forks are the lab runs
    # whose source it is. Both are in the documents folded since; older rows have neither.
    """
    ALTER TABLE {schema}.agent_runs
        ADD COLUMN golden boolean NOT NULL DEFAULT false,
        ADD COLUMN lab_source text;
    CREATE INDEX ON {schema}.agent_runs (lab_source, first_seq) WHERE lab_source IS NOT NULL;
    CREATE INDEX ON {schema}.agent_runs (first_seq) WHERE golden;
    """,
    # Spend (issue 40, docs/spend.md): the team a run counts against and why a budget holds
    # it. Older rows have neither until a rebuild or their run's next event.
    """
    ALTER TABLE {schema}.agent_runs
        ADD COLUMN team text,
        ADD COLUMN budget_wait text;
    CREATE INDEX ON {schema}.agent_runs (team, first_seq) WHERE team IS NOT NULL;
    """,
)

# Rows travel to PostgreSQL as one JSON array per batch: each element is the row's document
# (`doc`, what the next fold loads) plus the totals derived from it, and the typed columns
# for queries are extracted from it server-side. One text parameter instead of 24 arrays of
# 500 values: asyncpg encoded those element by element, with an ABC isinstance check each,
# and that was the largest client-side cost of writing a batch.
COLUMNS = {
    "run_id": "d->>'run_id'",
    "status": "d->>'status'",
    "reason": "d->>'reason'",
    "agent_id": "d->>'agent_id'",
    "task_id": "d->>'task_id'",
    "origin": "d->>'origin'",
    "attempt": "(d->>'attempt')::int",
    "runtime": "d->>'runtime'",
    "runtime_handle": "d->>'runtime_handle'",
    "catalog_revisions": "d->'catalog_revisions'",
    **{f"{p}_at": f"(d->'phases'->>'{p}')::timestamptz" for p in PHASES},
    "ended_at": "(d->>'ended_at')::timestamptz",
    "last_event_at": "(d->>'last_event_at')::timestamptz",
    "tokens_in": "(e->>'tokens_in')::bigint",
    "tokens_out": "(e->>'tokens_out')::bigint",
    "cost_usd": "(e->>'cost_usd')::float8",
    "condensations": "(e->>'condensations')::int",
    "result_summary": "d->'result'->>'summary'",
    "input": "d->>'input'",
    "requested_by": "d->>'requested_by'",
    "labels": "COALESCE(d->'labels', '{}'::jsonb)",
    "flow": "d->'labels'->>'flow'",
    "flow_run_id": "d->'labels'->>'flow_run_id'",
    "turns": "(e->>'turns')::int",
    "golden": "(e->>'golden')::boolean",
    "lab_source": "d->'lab'->>'source_run_id'",
    "team": "d->>'team'",
    "budget_wait": "e->>'budget_wait'",
    "first_seq": "COALESCE((d->>'first_seq')::bigint, 0)",
    "last_seq": "(d->>'last_seq')::bigint",
    "doc": "d",
}


def upsert_sql(schema: str) -> str:
    names = ", ".join(COLUMNS)
    values = ", ".join(COLUMNS.values())
    updates = ", ".join(f"{name} = EXCLUDED.{name}" for name in list(COLUMNS)[1:])
    return (
        f"INSERT INTO {quote_ident(schema)}.agent_runs ({names})"
        f" SELECT {values} FROM jsonb_array_elements($1::jsonb) AS e,"
        " LATERAL (SELECT e->'doc' AS d) AS x"
        f" ON CONFLICT (run_id) DO UPDATE SET {updates}"
    )


def rows_json(rows: Iterable[RunRow]) -> str:
    """The batch parameter of `upsert_sql`: a JSON array of {totals..., doc}."""
    return (
        "["
        + ",".join(
            f'{{"tokens_in":{r.tokens_in},"tokens_out":{r.tokens_out},'
            f'"cost_usd":{json.dumps(r.cost_usd)},"condensations":{r.condensations},'
            f'"turns":{r.turn_count},"golden":{"true" if r.golden else "false"},'
            f'"budget_wait":{json.dumps(r.budget_wait)},'
            f'"doc":{r.to_json()}}}'
            for r in rows
        )
        + "]"
    )


def to_fact(d: Decoded) -> RunFact | None:
    """The fact of a decoded run event; None for the `new` token (core re-publishes those)."""
    run_id = d.address.run_id
    if run_id is None or run_id == subjects.NEW_RUN_TOKEN or d.address.event is None:
        return None
    return RunFact(
        run_id, d.address.event, d.envelope.stream_seq or 0, d.envelope.timestamp, d.event
    )


def _log_golden_mark(row: RunRow, seq: int) -> None:
    ended = row.terminal_seq
    if ended is None or seq < ended:
        log.warning("run %s: golden mark at seq %d ignored, the run had not ended", row.run_id, seq)


class AgentRunsProjection:
    name = "agent_runs"
    sources: tuple[Source, ...] = (Source(RUNS),)

    def __init__(
        self, schema: str = RUNS_SCHEMA, on_canary_end: Callable[[], None] | None = None
    ) -> None:
        self.schema = schema
        # Called when a canary run's terminal event is folded (the leader's canary decider).
        self.on_canary_end = on_canary_end

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
                if type(fact.event) is RunGoldenMarked:
                    _log_golden_mark(row, fact.seq)
                if self.on_canary_end and row.canary is not None and fact.name in TERMINAL_EVENTS:
                    self.on_canary_end()
                if span is not None:
                    span.set_attribute(AGENT_ID, row.agent_id or "")
                    span.set_attribute(TASK_ID, row.task_id or "")
                    span.set_attribute("nexus.run.status", row.status or "")
        await conn.execute(upsert_sql(schema), rows_json(rows[i] for i in ids))
