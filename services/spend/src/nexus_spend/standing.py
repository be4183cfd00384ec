"""Reads what a budget's scopes are decided on (ledger, holds, admissions, extensions, asks)
from PostgreSQL, and where each scope stands (`nexus budgets show`, a run's spend)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime

from nexus_events.events.budgets import BudgetDefinition, ScopeKind, period_bucket
from nexus_events.events.spend import ScopeStanding
from nexus_events.transport.projection import Conn, quote_ident

from nexus_spend.coverage import Coverage, LedgerKey, RunScopes, covering
from nexus_spend.decide import AskSeen, AskState, BudgetFacts, Extension, Usage, standing
from nexus_spend.schema import LIVE_SCHEMA, SCHEMA


def key_columns(keys: Iterable[LedgerKey]) -> tuple[list[str], list[str], list[str], list[str]]:
    ks = list(keys)
    return (
        [k.scope for k in ks],
        [k.name for k in ks],
        [k.period for k in ks],
        [k.bucket for k in ks],
    )


# The keys as a relation to join on (unnest of four parallel arrays).
_KEYS = "unnest($1::text[], $2::text[], $3::text[], $4::text[]) AS k(scope, name, period, bucket)"
_ON_KEY = "USING (scope, name, period, bucket)"


async def read_facts(
    conn: Conn,
    coverages: Sequence[Coverage],
    *,
    run_id: str | None = None,
    turn: int | None = None,
    schema: str = SCHEMA,
    live_schema: str = LIVE_SCHEMA,
) -> list[BudgetFacts]:
    """The facts of each coverage, in its order. Holds of (`run_id`, `turn`) are left out
    (the call asking again replaces them), and so are `run_id`'s own admissions."""
    if not coverages:
        return []
    q, lq = quote_ident(schema), quote_ident(live_schema)
    keys = key_columns({c.key for c in coverages})
    spent = {
        LedgerKey(r["scope"], r["name"], r["period"], r["bucket"]): Usage(
            r["cost_usd"], r["tokens"]
        )
        for r in await conn.fetch(f"SELECT l.* FROM {_KEYS} JOIN {q}.ledger l {_ON_KEY}", *keys)
    }
    held = {
        LedgerKey(r["scope"], r["name"], r["period"], r["bucket"]): Usage(
            r["cost_usd"], r["tokens"]
        )
        for r in await conn.fetch(
            f"""SELECT scope, name, period, bucket, sum(h.cost_usd) AS cost_usd,
                    sum(h.tokens)::bigint AS tokens
                FROM {_KEYS} JOIN {lq}.holds h {_ON_KEY}
                WHERE NOT (h.run_id IS NOT DISTINCT FROM $5 AND h.turn IS NOT DISTINCT FROM $6)
                GROUP BY scope, name, period, bucket""",
            *keys,
            run_id,
            turn,
        )
    }
    runs = {
        LedgerKey(r["scope"], r["name"], r["period"], r["bucket"]): int(r["runs"])
        for r in await conn.fetch(
            f"""SELECT scope, name, period, bucket, count(DISTINCT a.run_id) AS runs
                FROM {_KEYS} JOIN {lq}.admissions a {_ON_KEY}
                WHERE a.run_id IS DISTINCT FROM $5
                GROUP BY scope, name, period, bucket""",
            *keys,
            run_id,
        )
    }
    scopes = sorted({(c.budget.id, c.key.instance, c.key.bucket) for c in coverages})
    scope_cols = ([b for b, _, _ in scopes], [i for _, i, _ in scopes], [k for _, _, k in scopes])
    # The scopes as a relation: only their own asks and extensions are read (an unnamed
    # scope's budget has one per instance and period, for ever).
    of_scopes = "unnest($1::text[], $2::text[], $3::text[]) AS s(budget_id, instance, bucket)"
    extensions: dict[tuple[str, str, str], Extension] = {
        (r["budget_id"], r["instance"], r["bucket"]): Extension(
            r["cost_usd"], int(r["tokens"]), int(r["runs"])
        )
        for r in await conn.fetch(
            f"""SELECT budget_id, instance, bucket, sum(e.cost_usd) AS cost_usd,
                    sum(e.tokens) AS tokens, sum(e.runs) AS runs
                FROM {of_scopes} JOIN {q}.extensions e USING (budget_id, instance, bucket)
                GROUP BY budget_id, instance, bucket""",
            *scope_cols,
        )
    }
    asks: dict[tuple[str, str, str], list[AskSeen]] = {}
    for r in await conn.fetch(
        f"""SELECT a.ask_id, budget_id, a.revision, instance, bucket, a.round, a.state
            FROM {of_scopes} JOIN {q}.asks a USING (budget_id, instance, bucket)
            ORDER BY a.round""",
        *scope_cols,
    ):
        seen = AskSeen(r["ask_id"], r["revision"], r["round"], AskState(r["state"]))
        asks.setdefault((r["budget_id"], r["instance"], r["bucket"]), []).append(seen)
    out = []
    for c in coverages:
        scope = (c.budget.id, c.key.instance, c.key.bucket)
        out.append(
            BudgetFacts(
                coverage=c,
                spent=spent.get(c.key, Usage()),
                held=held.get(c.key, Usage()),
                runs=runs.get(c.key, 0),
                extension=extensions.get(scope, Extension()),
                asks=tuple(asks.get(scope, ())),
            )
        )
    return out


async def standings_for_budget(
    conn: Conn,
    budget: BudgetDefinition,
    revision: int,
    at: datetime,
    *,
    schema: str = SCHEMA,
    live_schema: str = LIVE_SCHEMA,
) -> list[ScopeStanding]:
    """Each scope instance of `budget` seen in the ledger in the period `at` falls in (a
    named scope's own instance even before it spent anything), by instance."""
    q = quote_ident(schema)
    kind, period = budget.scope.kind, budget.period
    bucket = period_bucket(period, at)
    rows = await conn.fetch(
        f"SELECT name FROM {q}.ledger WHERE scope = $1 AND period = $2 AND bucket = $3",
        str(kind),
        str(period),
        bucket,
    )
    names = {r["name"] for r in rows}
    wanted = budget.scope.name
    if kind is ScopeKind.FLOW_RUN and wanted is not None:
        # Named after a flow: the runs of that flow, each on its own.
        flow_runs = await conn.fetch(
            f"SELECT DISTINCT flow_run_id FROM {q}.runs WHERE flow = $1", wanted
        )
        names &= {r["flow_run_id"] for r in flow_runs}
    elif wanted is not None:
        names = {wanted}
    elif kind is ScopeKind.GLOBAL:
        names = {""}
    coverages = [
        Coverage(budget, revision, LedgerKey(str(kind), name, str(period), bucket))
        for name in sorted(names)
    ]
    facts = await read_facts(conn, coverages, schema=schema, live_schema=live_schema)
    return [standing(f) for f in facts]


async def standings_for_run(
    conn: Conn,
    scopes: RunScopes,
    budgets: Iterable[tuple[BudgetDefinition, int]],
    at: datetime,
    *,
    schema: str = SCHEMA,
    live_schema: str = LIVE_SCHEMA,
) -> list[ScopeStanding]:
    """The standing of every budget covering the run, at the run's own scope instances."""
    coverages = covering(budgets, scopes, at)
    facts = await read_facts(conn, coverages, schema=schema, live_schema=live_schema)
    return [standing(f) for f in facts]


__all__ = ["key_columns", "read_facts", "standings_for_budget", "standings_for_run"]
