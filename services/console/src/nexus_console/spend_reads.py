"""The spend service's queries as the console's pages ask them (docs/spend.md): usage grouped
by one key, every budget with its standings, and runs' spend against their scopes; each reply
validated as the contract's model, and each scope's bar (spent, reserved, limit) computed."""

from __future__ import annotations

from dataclasses import dataclass

from nexus_events.contract import subjects
from nexus_events.events.spend import (
    BudgetsList,
    BudgetsReply,
    RunSpend,
    RunsSpend,
    RunsSpendReply,
    ScopeStanding,
    UsageQuery,
    UsageReport,
)
from pydantic import ValidationError

from nexus_console.reads import QueryError, Reads


def _invalid(subject: str, exc: ValidationError) -> QueryError:
    # The service answered something the contract does not allow: its fault, a 502.
    return QueryError(502, f"{subject} answered outside the contract: {exc.errors()[0]['msg']}")


async def usage(reads: Reads, query: UsageQuery) -> UsageReport:
    data = await reads.query(subjects.SPEND_USAGE, query.model_dump(mode="json"))
    try:
        return UsageReport.model_validate(data)
    except ValidationError as exc:
        raise _invalid(subjects.SPEND_USAGE, exc) from None


async def budgets(reads: Reads) -> BudgetsReply:
    data = await reads.query(subjects.SPEND_BUDGETS_LIST, BudgetsList().model_dump(mode="json"))
    try:
        return BudgetsReply.model_validate(data)
    except ValidationError as exc:
        raise _invalid(subjects.SPEND_BUDGETS_LIST, exc) from None


async def run_spend(reads: Reads, run_id: str) -> RunSpend | None:
    """The run's spend and scopes; None when the service does not know the run."""
    body = RunsSpend(run_ids=[run_id]).model_dump(mode="json")
    data = await reads.query(subjects.SPEND_RUNS, body)
    try:
        reply = RunsSpendReply.model_validate(data)
    except ValidationError as exc:
        raise _invalid(subjects.SPEND_RUNS, exc) from None
    return next((r for r in reply.runs if r.run_id == run_id), None)


@dataclass(frozen=True, slots=True)
class Bar:
    """One scope's standing as a bar: the measure its budget limits first (cost, else tokens,
    else runs), spent and reserved as shares of the limit (0-100, capped), and the words."""

    measure: str
    spent_pct: float
    reserved_pct: float
    text: str


def _pct(part: float, whole: float) -> float:
    if whole <= 0:
        return 100.0 if part > 0 else 0.0
    return min(100.0, round(part / whole * 100, 1))


def bar_of(s: ScopeStanding) -> Bar:
    if s.limit_cost_usd is not None:
        spent, held, limit = s.spent_cost_usd, s.reserved_cost_usd, s.limit_cost_usd
        text = f"${spent:,.2f} spent, ${held:,.2f} reserved of ${limit:,.2f}"
        return Bar("cost", _pct(spent, limit), _pct(held, limit), text)
    if s.limit_tokens is not None:
        spent_t, held_t, limit_t = s.spent_tokens, s.reserved_tokens, s.limit_tokens
        text = f"{spent_t:,} tokens spent, {held_t:,} reserved of {limit_t:,}"
        return Bar("tokens", _pct(spent_t, limit_t), _pct(held_t, limit_t), text)
    limit_r = s.limit_runs or 0
    return Bar("runs", _pct(s.runs, limit_r), 0.0, f"{s.runs} runs of {limit_r}")
