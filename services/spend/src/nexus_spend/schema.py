"""The spend service's tables: the projection (schema ``spend``, rebuilt from the streams) and
the live reservations (schema ``spend_live``, never rebuilt: they are state of calls in flight).

The projection (`nexus_spend.projection`) follows NEXUS_RUNS (usage and settlement),
NEXUS_CATALOG (budgets) and NEXUS_BUDGETS (asks and extensions) and writes, in the batch's
transaction with its checkpoint:

- ``runs``: one row per run, its scopes (team, agent, revision, model, task, flow, flow run,
  origin) and its totals (model calls settled, tokens, USD, wall seconds);
- ``run_calls``: one row per model call of a run (a turn, or a condensation's summary), keyed
  so that a call published twice (a resumed attempt) counts once, with the larger usage;
- ``ledger``: settled spend per scope instance and period bucket, for every scope kind and
  period whether or not a budget names it yet (a budget applied mid-month sees the month);
- ``budgets`` / ``budget_revisions``: the catalog's budgets; ``asks`` and ``extensions``: the
  service's own record folded back from NEXUS_BUDGETS;
- ``thresholds``: the warnings announced (one per budget revision, instance and bucket).

The live schema holds ``holds`` (a model call's reserved estimate until its turn settles or the
run ends) and ``admissions`` (a run counted against run limits when admitted). A reservation
locks the ledger rows of its keys (``SELECT ... FOR UPDATE``, keys in sorted order) and the
projection's settlement updates the same rows, so the two never interleave (docs/spend.md).
"""

from __future__ import annotations

from nexus_events.transport.projection import Conn, quote_ident

SCHEMA = "spend"
LIVE_SCHEMA = "spend_live"


async def create_projection_tables(conn: Conn, schema: str) -> None:
    """The projection's tables in `schema` (the live ``spend`` or a rebuild's)."""
    q = quote_ident(schema)
    statements = (
        f"""CREATE TABLE IF NOT EXISTS {q}.runs (
                run_id text PRIMARY KEY,
                first_seq bigint NOT NULL,
                team text,
                agent_id text,
                agent_revision int,
                model text,
                task_id text,
                flow text,
                flow_run_id text,
                origin text,
                requested_at timestamptz,
                day date,
                status text,
                ended_at timestamptz,
                started_at timestamptz,
                wall_seconds double precision NOT NULL DEFAULT 0,
                calls int NOT NULL DEFAULT 0,
                tokens_in bigint NOT NULL DEFAULT 0,
                tokens_out bigint NOT NULL DEFAULT 0,
                cost_usd double precision NOT NULL DEFAULT 0)""",
        f"CREATE INDEX IF NOT EXISTS runs_day ON {q}.runs (day)",
        f"CREATE INDEX IF NOT EXISTS runs_team ON {q}.runs (team, day)",
        # kind: 'turn' (key: the turn number) or 'condensed' (key: turn and strategy).
        f"""CREATE TABLE IF NOT EXISTS {q}.run_calls (
                run_id text NOT NULL,
                call_key text NOT NULL,
                at timestamptz NOT NULL,
                tokens_in bigint NOT NULL,
                tokens_out bigint NOT NULL,
                cost_usd double precision NOT NULL,
                PRIMARY KEY (run_id, call_key))""",
        # scope: 'global' (name ''), 'team', 'agent', 'task', 'flow_run' (ScopeKind);
        # period: BudgetPeriod; bucket: period_bucket(period, call time).
        f"""CREATE TABLE IF NOT EXISTS {q}.ledger (
                scope text NOT NULL,
                name text NOT NULL,
                period text NOT NULL,
                bucket text NOT NULL,
                cost_usd double precision NOT NULL DEFAULT 0,
                tokens bigint NOT NULL DEFAULT 0,
                calls bigint NOT NULL DEFAULT 0,
                PRIMARY KEY (scope, name, period, bucket))""",
        f"""CREATE TABLE IF NOT EXISTS {q}.budgets (
                budget_id text PRIMARY KEY,
                revision int NOT NULL,
                deleted boolean NOT NULL,
                definition jsonb,
                updated_at timestamptz)""",
        f"""CREATE TABLE IF NOT EXISTS {q}.budget_revisions (
                budget_id text NOT NULL,
                revision int NOT NULL,
                definition jsonb NOT NULL,
                applied_by text,
                applied_at timestamptz,
                PRIMARY KEY (budget_id, revision))""",
        # state: open, approved, denied, expired.
        f"""CREATE TABLE IF NOT EXISTS {q}.asks (
                ask_id text PRIMARY KEY,
                budget_id text NOT NULL,
                revision int NOT NULL,
                instance text NOT NULL,
                bucket text NOT NULL,
                round int NOT NULL,
                state text NOT NULL,
                approval_id text NOT NULL,
                expires_at timestamptz NOT NULL,
                opened_at timestamptz,
                closed_at timestamptz,
                decided_by text)""",
        f"CREATE INDEX IF NOT EXISTS asks_scope ON {q}.asks (budget_id, instance, bucket)",
        f"""CREATE TABLE IF NOT EXISTS {q}.extensions (
                ask_id text PRIMARY KEY,
                budget_id text NOT NULL,
                revision int NOT NULL,
                instance text NOT NULL,
                bucket text NOT NULL,
                cost_usd double precision NOT NULL,
                tokens bigint NOT NULL,
                runs int NOT NULL)""",
        f"""CREATE INDEX IF NOT EXISTS extensions_scope
                ON {q}.extensions (budget_id, instance, bucket)""",
        f"""CREATE TABLE IF NOT EXISTS {q}.thresholds (
                budget_id text NOT NULL,
                revision int NOT NULL,
                instance text NOT NULL,
                bucket text NOT NULL,
                PRIMARY KEY (budget_id, revision, instance, bucket))""",
    )
    for statement in statements:
        await conn.execute(statement)


async def create_live_tables(conn: Conn, schema: str = LIVE_SCHEMA) -> None:
    """The reservations' tables (idempotent)."""
    q = quote_ident(schema)
    statements = (
        f"CREATE SCHEMA IF NOT EXISTS {q}",
        # One hold per (run, turn, ledger key): a resumed attempt reserving the same turn
        # again replaces it; the turn's settlement or the run's ending deletes it.
        f"""CREATE TABLE IF NOT EXISTS {q}.holds (
                run_id text NOT NULL,
                turn int NOT NULL,
                scope text NOT NULL,
                name text NOT NULL,
                period text NOT NULL,
                bucket text NOT NULL,
                cost_usd double precision NOT NULL,
                tokens bigint NOT NULL,
                held_at timestamptz NOT NULL DEFAULT now(),
                PRIMARY KEY (run_id, turn, scope, name, period, bucket))""",
        f"CREATE INDEX IF NOT EXISTS holds_key ON {q}.holds (scope, name, period, bucket)",
        # A run counted against the run limits of its keys, once (admission is idempotent).
        f"""CREATE TABLE IF NOT EXISTS {q}.admissions (
                run_id text NOT NULL,
                scope text NOT NULL,
                name text NOT NULL,
                period text NOT NULL,
                bucket text NOT NULL,
                admitted_at timestamptz NOT NULL DEFAULT now(),
                PRIMARY KEY (run_id, scope, name, period, bucket))""",
        f"""CREATE INDEX IF NOT EXISTS admissions_key
                ON {q}.admissions (scope, name, period, bucket)""",
    )
    for statement in statements:
        await conn.execute(statement)
