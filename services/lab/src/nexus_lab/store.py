"""The lab's projection (schema ``lab``): eval suites and their revisions folded from
NEXUS_CATALOG (``eval.applied``/``eval.deleted``), and eval runs (one state document each)
with their planned case runs folded from NEXUS_EVALS; rows and checkpoints commit together
(`nexus_events.transport.projection.ProjectionRunner`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import asyncpg
from nexus_events.contract import subjects
from nexus_events.contract.codec import Decoded
from nexus_events.contract.streams import CATALOG, EVALS
from nexus_events.events.evals import EvalApplied, EvalDeleted, EvalSuite
from nexus_events.transport.projection import Conn, Source, quote_ident

from nexus_lab.decide import SuiteRevision
from nexus_lab.state import EvalState, fold

SCHEMA = "lab"


class LabProjection:
    """Folds the eval suites and eval runs. Which eval runs a batch touched is read from the
    batch after it commits (`LabRunner.handle`), not collected here: the two sources are
    followed concurrently, so a set filled during one feed's transaction could be taken by
    the other feed's hand-off before that transaction committed."""

    name = "lab"
    sources = (
        Source(CATALOG, (subjects.catalog_events_filter(subjects.CatalogKind.EVAL),)),
        Source(EVALS),
    )

    def __init__(self, schema: str = SCHEMA) -> None:
        self.schema = schema

    async def create(self, conn: Conn, schema: str) -> None:
        q = quote_ident(schema)
        await conn.execute(
            f"""CREATE TABLE IF NOT EXISTS {q}.suites (
                    suite_id text PRIMARY KEY,
                    revision int NOT NULL,
                    deleted boolean NOT NULL,
                    updated_at timestamptz)"""
        )
        await conn.execute(
            f"""CREATE TABLE IF NOT EXISTS {q}.suite_revisions (
                    suite_id text NOT NULL,
                    revision int NOT NULL,
                    definition jsonb NOT NULL,
                    applied_by text,
                    applied_at timestamptz,
                    PRIMARY KEY (suite_id, revision))"""
        )
        await conn.execute(
            f"""CREATE TABLE IF NOT EXISTS {q}.eval_runs (
                    eval_run_id text PRIMARY KEY,
                    suite text NOT NULL,
                    status text NOT NULL,
                    first_seq bigint NOT NULL,
                    requested_at timestamptz,
                    updated_at timestamptz,
                    state jsonb NOT NULL)"""
        )
        await conn.execute(
            f"CREATE INDEX IF NOT EXISTS eval_runs_suite ON {q}.eval_runs (suite, first_seq)"
        )
        await conn.execute(
            f"""CREATE TABLE IF NOT EXISTS {q}.eval_cases (
                    run_id text PRIMARY KEY,
                    eval_run_id text NOT NULL,
                    case_key text NOT NULL,
                    case_id text NOT NULL,
                    agent_id text NOT NULL,
                    revision int NOT NULL,
                    trial int NOT NULL,
                    passed boolean)"""
        )
        await conn.execute(
            f"CREATE INDEX IF NOT EXISTS eval_cases_run ON {q}.eval_cases (eval_run_id)"
        )

    async def apply(self, conn: Conn, schema: str, batch: Sequence[Decoded]) -> None:
        q = quote_ident(schema)
        states: dict[str, EvalState | None] = {}
        before: dict[str, EvalState | None] = {}
        first: dict[str, int] = {}
        for d in batch:
            event = d.event
            if isinstance(event, EvalApplied | EvalDeleted):
                await _suite_event(conn, q, d)
                continue
            eid = d.address.ids.get("eval_run_id")
            if eid is None or eid == subjects.NEW_RUN_TOKEN:
                continue  # `new` requests are re-published under an id by the engine
            if eid not in states:
                raw = await conn.fetchval(
                    f"SELECT state FROM {q}.eval_runs WHERE eval_run_id = $1 FOR UPDATE", eid
                )
                states[eid] = before[eid] = None if raw is None else EvalState.load(raw)
                first[eid] = d.envelope.stream_seq or 0
            states[eid] = fold(states[eid], eid, event, d.envelope.timestamp)
        for eid, state in states.items():
            if state is None or state is before[eid]:
                continue
            await _write(conn, q, state, first[eid], before[eid])


async def _suite_event(conn: Conn, q: str, d: Decoded) -> None:
    """An apply is the suite's next revision (as core numbers agent revisions); a delete hides
    the suite from `latest` but keeps its revisions for eval runs pinned to them."""
    suite_id = d.address.ids.get("id")
    if suite_id is None:
        return
    at = d.envelope.timestamp
    event = d.event
    if isinstance(event, EvalDeleted):
        await conn.execute(
            f"UPDATE {q}.suites SET deleted = true, updated_at = $2 WHERE suite_id = $1",
            suite_id,
            at,
        )
        return
    assert isinstance(event, EvalApplied)
    revision = await conn.fetchval(
        f"""INSERT INTO {q}.suites (suite_id, revision, deleted, updated_at)
            VALUES ($1, 1, false, $2)
            ON CONFLICT (suite_id) DO UPDATE SET revision = suites.revision + 1,
                deleted = false, updated_at = EXCLUDED.updated_at
            RETURNING revision""",
        suite_id,
        at,
    )
    await conn.execute(
        f"""INSERT INTO {q}.suite_revisions (suite_id, revision, definition, applied_by,
                applied_at) VALUES ($1, $2, $3, $4, $5) ON CONFLICT DO NOTHING""",
        suite_id,
        revision,
        event.suite.model_dump_json(),
        event.applied_by,
        at,
    )


async def _write(conn: Conn, q: str, s: EvalState, seq: int, old: EvalState | None) -> None:
    await conn.execute(
        f"""INSERT INTO {q}.eval_runs
                (eval_run_id, suite, status, first_seq, requested_at, updated_at, state)
            VALUES ($1, $2, $3, $4, $5, $6, $7)
            ON CONFLICT (eval_run_id) DO UPDATE SET status = EXCLUDED.status,
                updated_at = EXCLUDED.updated_at, state = EXCLUDED.state""",
        s.eval_run_id,
        s.suite,
        s.status,
        seq,
        s.requested_at,
        s.updated_at,
        s.document(),
    )
    old_started = {} if old is None else old.started
    old_graded = {} if old is None else old.graded
    for key, run_id in s.started.items():
        graded = s.graded.get(key)
        if old_started.get(key) == run_id and old_graded.get(key) == graded:
            continue
        planned = s.planned_case(key)
        if planned is None:
            continue
        await conn.execute(
            f"""INSERT INTO {q}.eval_cases (run_id, eval_run_id, case_key, case_id, agent_id,
                    revision, trial, passed) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
                ON CONFLICT (run_id) DO UPDATE SET passed = EXCLUDED.passed""",
            run_id,
            s.eval_run_id,
            key,
            planned.case,
            planned.agent_id,
            planned.revision,
            planned.trial,
            None if graded is None else graded.passed,
        )


async def load_state(
    pool: asyncpg.Pool[Any] | Conn, eval_run_id: str, schema: str = SCHEMA
) -> EvalState | None:
    raw = await pool.fetchval(
        f"SELECT state FROM {quote_ident(schema)}.eval_runs WHERE eval_run_id = $1", eval_run_id
    )
    return None if raw is None else EvalState.load(raw)


async def load_suite(
    pool: asyncpg.Pool[Any], suite_id: str, revision: int | None, schema: str = SCHEMA
) -> SuiteRevision | None:
    """A suite's revision (even one deleted since), or its latest while not deleted."""
    q = quote_ident(schema)
    if revision is None:
        row = await pool.fetchrow(
            f"""SELECT r.revision, r.definition FROM {q}.suites s
                JOIN {q}.suite_revisions r ON r.suite_id = s.suite_id AND r.revision = s.revision
                WHERE s.suite_id = $1 AND NOT s.deleted""",
            suite_id,
        )
    else:
        row = await pool.fetchrow(
            f"SELECT revision, definition FROM {q}.suite_revisions"
            " WHERE suite_id = $1 AND revision = $2",
            suite_id,
            revision,
        )
    if row is None:
        return None
    return SuiteRevision(row["revision"], EvalSuite.model_validate_json(row["definition"]))


__all__ = ["SCHEMA", "LabProjection", "load_state", "load_suite"]
