"""Reads what a budget's scopes are decided on (ledger, holds, admissions, extensions, asks)
from PostgreSQL, and where each scope stands (`nexus budgets show`, a run's spend)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

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


def _key(r: Any) -> LedgerKey:
    return LedgerKey(r["scope"], r["name"], r["period"], r["bucket"])


@dataclass(frozen=True, slots=True)
class ScopeRecords:
    """The service's record of some scopes (budget, instance, bucket): what approved asks
    added and every ask. Written by the projection only, so a reservation reads it before it
    takes its row locks."""

    extensions: dict[tuple[str, str, str], Extension]
    asks: dict[tuple[str, str, str], tuple[AskSeen, ...]]


async def read_records(
    conn: Conn, coverages: Sequence[Coverage], *, schema: str = SCHEMA
) -> ScopeRecords:
    q = quote_ident(schema)
    scopes = sorted({(c.budget.id, c.key.instance, c.key.bucket) for c in coverages})
    cols = ([b for b, _, _ in scopes], [i for _, i, _ in scopes], [k for _, _, k in scopes])
    # The scopes as a relation: only their own asks and extensions are read (an unnamed
    # scope's budget has one per instance and period, for ever).
    of_scopes = "unnest($1::text[], $2::text[], $3::text[]) AS s(budget_id, instance, bucket)"
    extensions = {
        (r["budget_id"], r["instance"], r["bucket"]): Extension(
            r["cost_usd"], int(r["tokens"]), int(r["runs"])
        )
        for r in await conn.fetch(
            f"""SELECT budget_id, instance, bucket, sum(e.cost_usd) AS cost_usd,
                    sum(e.tokens) AS tokens, sum(e.runs) AS runs
                FROM {of_scopes} JOIN {q}.extensions e USING (budget_id, instance, bucket)
                GROUP BY budget_id, instance, bucket""",
            *cols,
        )
    }
    asks: dict[tuple[str, str, str], list[AskSeen]] = {}
    for r in await conn.fetch(
        f"""SELECT a.ask_id, budget_id, a.revision, instance, bucket, a.round, a.state
            FROM {of_scopes} JOIN {q}.asks a USING (budget_id, instance, bucket)
            ORDER BY a.round""",
        *cols,
    ):
        seen = AskSeen(r["ask_id"], r["revision"], r["round"], AskState(r["state"]))
        asks.setdefault((r["budget_id"], r["instance"], r["bucket"]), []).append(seen)
    return ScopeRecords(extensions, {k: tuple(v) for k, v in asks.items()})


async def read_spent(
    conn: Conn, keys: Iterable[LedgerKey], *, schema: str = SCHEMA
) -> dict[LedgerKey, Usage]:
    """The ledger's settled spend of `keys` (keys without a row are left out)."""
    q = quote_ident(schema)
    rows = await conn.fetch(
        f"SELECT l.* FROM {_KEYS} JOIN {q}.ledger l {_ON_KEY}", *key_columns(keys)
    )
    return {_key(r): Usage(r["cost_usd"], r["tokens"]) for r in rows}


async def read_live(
    conn: Conn,
    keys: Iterable[LedgerKey],
    *,
    run_id: str | None = None,
    turn: int | None = None,
    live_schema: str = LIVE_SCHEMA,
) -> tuple[dict[LedgerKey, Usage], dict[LedgerKey, int]]:
    """The holds on each key but (`run_id`, `turn`)'s own (the call asking again replaces
    them), and the runs admitted on it but `run_id`: one statement, read after the lock."""
    lq = quote_ident(live_schema)
    rows = await conn.fetch(
        f"""SELECT k.scope, k.name, k.period, k.bucket, h.cost_usd, h.tokens, a.runs
            FROM {_KEYS}
            CROSS JOIN LATERAL (
                SELECT coalesce(sum(h.cost_usd), 0) AS cost_usd,
                    coalesce(sum(h.tokens), 0)::bigint AS tokens
                FROM {lq}.holds h
                WHERE (h.scope, h.name, h.period, h.bucket) = (k.scope, k.name, k.period, k.bucket)
                    AND NOT (h.run_id IS NOT DISTINCT FROM $5 AND h.turn IS NOT DISTINCT FROM $6)
            ) h
            CROSS JOIN LATERAL (
                SELECT count(DISTINCT a.run_id) AS runs FROM {lq}.admissions a
                WHERE (a.scope, a.name, a.period, a.bucket) = (k.scope, k.name, k.period, k.bucket)
                    AND a.run_id IS DISTINCT FROM $5
            ) a""",
        *key_columns(keys),
        run_id,
        turn,
    )
    held = {_key(r): Usage(r["cost_usd"], r["tokens"]) for r in rows}
    return held, {_key(r): int(r["runs"]) for r in rows}


def assemble(
    coverages: Sequence[Coverage],
    spent: dict[LedgerKey, Usage],
    held: dict[LedgerKey, Usage],
    runs: dict[LedgerKey, int],
    records: ScopeRecords,
) -> list[BudgetFacts]:
    """Each coverage's facts, in its order."""
    out = []
    for c in coverages:
        scope = (c.budget.id, c.key.instance, c.key.bucket)
        out.append(
            BudgetFacts(
                coverage=c,
                spent=spent.get(c.key, Usage()),
                held=held.get(c.key, Usage()),
                runs=runs.get(c.key, 0),
                extension=records.extensions.get(scope, Extension()),
                asks=records.asks.get(scope, ()),
            )
        )
    return out


async def read_facts(
    conn: Conn,
    coverages: Sequence[Coverage],
    *,
    schema: str = SCHEMA,
    live_schema: str = LIVE_SCHEMA,
) -> list[BudgetFacts]:
    """The facts of each coverage, in its order, unlocked (a reading, not a decision)."""
    if not coverages:
        return []
    keys = {c.key for c in coverages}
    records = await read_records(conn, coverages, schema=schema)
    spent = await read_spent(conn, keys, schema=schema)
    held, runs = await read_live(conn, keys, live_schema=live_schema)
    return assemble(coverages, spent, held, runs, records)


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


__all__ = [
    "ScopeRecords",
    "assemble",
    "key_columns",
    "read_facts",
    "read_live",
    "read_records",
    "read_spent",
    "standings_for_budget",
    "standings_for_run",
]
