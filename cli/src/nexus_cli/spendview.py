"""How the CLI prints the spend service's replies: usage rows, a scope's standing, money."""

from __future__ import annotations

from collections.abc import Sequence

from nexus_events.contract import subjects
from nexus_events.events.budgets import BudgetDefinition, BudgetLimits
from nexus_events.events.spend import (
    RunSpend,
    RunsSpend,
    RunsSpendReply,
    ScopeStanding,
    StandingState,
    UsageLine,
)
from pydantic import ValidationError

from nexus_cli.client import Session
from nexus_cli.errors import CliError
from nexus_cli.output import duration

USAGE_COLUMNS = ("KEY", "RUNS", "CALLS", "TOKENS IN", "TOKENS OUT", "COST", "WALL")
# The key of runs that have none (no team, no task ...): the reply says None.
NO_KEY = "(none)"
# Seconds a run's view waits for the spend service before it is shown without spend.
RUN_SPEND_WAIT = 2.0
SPEND = "the spend service"


def usd(value: float) -> str:
    """Dollars as people read them: cents above a dollar, four places below (a call is cheap)."""
    return f"${value:,.2f}" if abs(value) >= 1 else f"${value:.4f}"


def usage_row(line: UsageLine, key: str | None = None) -> tuple[str, ...]:
    return (
        key if key is not None else (line.key if line.key is not None else NO_KEY),
        str(line.runs),
        str(line.turns),
        f"{line.tokens_in:,}",
        f"{line.tokens_out:,}",
        usd(line.cost_usd),
        duration(line.wall_seconds),
    )


def limits_text(limits: BudgetLimits) -> str:
    """``$50.00, 1,000,000 tokens, 20 runs``: each limit the budget names."""
    parts = []
    if limits.cost_usd is not None:
        parts.append(usd(limits.cost_usd))
    if limits.tokens is not None:
        parts.append(f"{limits.tokens:,} tokens")
    if limits.runs is not None:
        parts.append(f"{limits.runs:,} runs")
    return ", ".join(parts)


def standing_text(s: ScopeStanding) -> str:
    """Spent / reserved / limit of the budget's first limit, e.g. ``$31.20 / $0.40 / $50.00``
    (cost first, else tokens, else runs)."""
    if s.limit_cost_usd is not None or (s.limit_tokens is None and s.limit_runs is None):
        limit = "-" if s.limit_cost_usd is None else usd(s.limit_cost_usd)
        return f"{usd(s.spent_cost_usd)} / {usd(s.reserved_cost_usd)} / {limit}"
    if s.limit_tokens is not None:
        return f"{s.spent_tokens:,} / {s.reserved_tokens:,} / {s.limit_tokens:,} tokens"
    return f"{s.runs:,} / - / {s.limit_runs:,} runs"


def _in_tokens(s: ScopeStanding) -> bool:
    """A budget limiting tokens and not cost is shown in tokens."""
    return s.limit_cost_usd is None and s.limit_tokens is not None


def spent_text(s: ScopeStanding) -> str:
    """What the scope spent, in the unit of its first limit (cost, else tokens)."""
    return f"{s.spent_tokens:,} tokens" if _in_tokens(s) else usd(s.spent_cost_usd)


def reserved_text(s: ScopeStanding) -> str:
    """What calls in flight hold against the scope, in the same unit as `spent_text`."""
    return f"{s.reserved_tokens:,} tokens" if _in_tokens(s) else usd(s.reserved_cost_usd)


def left_text(s: ScopeStanding) -> str:
    left = s.left_cost_usd()
    if left is not None:
        return usd(left)
    if s.limit_tokens is not None:
        return f"{max(0, s.limit_tokens - s.spent_tokens - s.reserved_tokens):,} tokens"
    if s.limit_runs is not None:
        return f"{max(0, s.limit_runs - s.runs):,} runs"
    return "-"


def _share(spent: float, limit: float) -> str:
    return "100 %" if limit <= 0 else f"{spent / limit * 100:.0f} %"


def run_scope_line(s: ScopeStanding) -> str:
    """One covering scope of a run: ``team:alpha month 2026-11: $31.20 of $50.00 (62 %)``."""
    head = f"{s.instance} {s.period} {s.bucket}"
    if s.limit_cost_usd is not None:
        spent = s.spent_cost_usd + s.reserved_cost_usd
        text = f"{usd(spent)} of {usd(s.limit_cost_usd)} ({_share(spent, s.limit_cost_usd)})"
    elif s.limit_tokens is not None:
        spent_tokens = s.spent_tokens + s.reserved_tokens
        share = _share(spent_tokens, s.limit_tokens)
        text = f"{spent_tokens:,} of {s.limit_tokens:,} tokens ({share})"
    elif s.limit_runs is not None:
        text = f"{s.runs:,} of {s.limit_runs:,} runs ({_share(s.runs, s.limit_runs)})"
    else:
        text = usd(s.spent_cost_usd)
    state = "" if s.state is StandingState.OK else f" [{s.state}]"
    return f"{head}: {text}{state} ({s.budget_id})"


def budget_row(budget: BudgetDefinition, standings: Sequence[ScopeStanding]) -> tuple[str, ...]:
    """`nexus budgets ls`: id, scope, period, limits, on_exceed, the standing, the state; a
    budget over many scope instances shows the one nearest its limit."""
    nearest = max(standings, key=_used_share, default=None)
    return (
        budget.id,
        budget.scope.label(),
        str(budget.period),
        limits_text(budget.limits),
        str(budget.on_exceed),
        "" if nearest is None else standing_text(nearest),
        "" if nearest is None else str(nearest.state),
    )


def _used_share(s: ScopeStanding) -> float:
    shares = [
        (s.spent_cost_usd + s.reserved_cost_usd) / s.limit_cost_usd if s.limit_cost_usd else 0.0,
        (s.spent_tokens + s.reserved_tokens) / s.limit_tokens if s.limit_tokens else 0.0,
        s.runs / s.limit_runs if s.limit_runs else 0.0,
    ]
    return max(shares)


async def run_spend(s: Session, run_id: str) -> RunSpend | None:
    """The run's spend and its scopes' standing (``nexus.spend.v1.runs``); None when the spend
    service does not answer, or knows nothing of the run: the run is shown without it."""
    body = RunsSpend(run_ids=[run_id]).model_dump(mode="json")
    try:
        wait = min(s.timeout, RUN_SPEND_WAIT)
        data = await s.query(subjects.SPEND_RUNS, body, service=SPEND, wait=wait)
        reply = RunsSpendReply.model_validate(data)
    except (CliError, ValidationError):
        return None
    return next((r for r in reply.runs if r.run_id == run_id), None)


def spend_lines(spend: RunSpend) -> list[str]:
    """`nexus attach`'s spend section: the run's team, why it waits, each covering scope."""
    lines = []
    if spend.team:
        lines.append(f"  team     {spend.team}")
    if spend.waiting_for:
        lines.append(f"  waiting  {spend.waiting_for}")
    if spend.scopes:
        lines.append("  budgets:")
        lines.extend(f"    {run_scope_line(scope)}" for scope in spend.scopes)
    return lines
