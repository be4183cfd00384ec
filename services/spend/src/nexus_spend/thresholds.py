"""Which budgets a batch's calls carried past their ``warn_at`` share: the announcement
(`BudgetThresholdCrossed`) of each, once per budget revision, scope instance and period."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from nexus_events.contract import subjects
from nexus_events.events import BudgetThresholdCrossed
from nexus_events.events.budgets import BudgetDefinition, BudgetEvent, ScopeKind
from nexus_events.transport.projection import Conn
from nexus_events.transport.publish import Outgoing

from nexus_spend.coverage import Coverage, RunScopes, covering


@dataclass(frozen=True, slots=True)
class Spent:
    cost_usd: float
    tokens: int


def crossing(budget: BudgetDefinition, spent: Spent) -> float | None:
    """The largest share of a cost or token limit `spent` reached, when it is at or past the
    budget's warn_at; None below it (or without such a limit)."""
    shares = []
    limits = budget.limits
    if limits.cost_usd is not None:
        shares.append(_share(spent.cost_usd, limits.cost_usd))
    if limits.tokens is not None:
        shares.append(_share(spent.tokens, limits.tokens))
    if not shares:
        return None
    share = max(shares)
    return share if share >= budget.warn_at else None


def _share(spent: float, limit: float) -> float:
    if limit <= 0:
        return float("inf") if spent > 0 else 0.0
    return spent / limit


def announcement(cov: Coverage, spent: Spent, share: float) -> Outgoing:
    """The event, on ``nexus.budget.v1.<budget_id>.threshold_crossed``, with an id derived from
    what it is about: announced again (a crash before its record came back) it is stored once."""
    key = cov.key
    budget = cov.budget
    limits = budget.limits
    event = BudgetThresholdCrossed(
        budget_id=budget.id,
        revision=cov.revision,
        instance=key.instance,
        bucket=key.bucket,
        share=min(share, 1e9),
        spent_cost_usd=max(0.0, spent.cost_usd),
        limit_cost_usd=limits.cost_usd,
        spent_tokens=max(0, spent.tokens),
        limit_tokens=limits.tokens,
        task_id=key.name if key.scope == ScopeKind.TASK else None,
        flow_run_id=key.name if key.scope == ScopeKind.FLOW_RUN else None,
    )
    return Outgoing(
        subjects.budget_event(budget.id, BudgetEvent.THRESHOLD_CROSSED),
        event,
        msg_id=f"threshold:{budget.id}:{cov.revision}:{key.instance}:{key.bucket}",
    )


async def crossed(
    conn: Conn,
    q: str,
    budgets: list[tuple[BudgetDefinition, int]],
    touched: Iterable[tuple[RunScopes, datetime]],
) -> list[Outgoing]:
    """The announcements due after the batch's ledger updates (read in its transaction)."""
    seen: dict[tuple[str, str, str], Coverage] = {}
    for scopes, at in touched:
        for cov in covering(budgets, scopes, at):
            seen.setdefault((cov.budget.id, cov.key.instance, cov.key.bucket), cov)
    out = []
    for cov in seen.values():
        if await _announced(conn, q, cov):
            continue
        k = cov.key
        row = await conn.fetchrow(
            f"""SELECT cost_usd, tokens FROM {q}.ledger
                WHERE scope = $1 AND name = $2 AND period = $3 AND bucket = $4""",
            k.scope,
            k.name,
            k.period,
            k.bucket,
        )
        spent = Spent(0.0, 0) if row is None else Spent(row["cost_usd"], row["tokens"])
        share = crossing(cov.budget, spent)
        if share is not None:
            out.append(announcement(cov, spent, share))
    return out


async def _announced(conn: Conn, q: str, cov: Coverage) -> bool:
    found = await conn.fetchval(
        f"""SELECT 1 FROM {q}.thresholds
            WHERE budget_id = $1 AND revision = $2 AND instance = $3 AND bucket = $4""",
        cov.budget.id,
        cov.revision,
        cov.key.instance,
        cov.key.bucket,
    )
    return found is not None
