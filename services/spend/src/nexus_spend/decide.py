"""Whether a model call (a reservation) or a run (an admission) may go on, from what the
ledger, the holds, the extensions and the asks say of every budget covering the run: pure.

A budget blocks when the call would take its scope past a limit (settled + others' holds +
the estimate > limit + extensions; a limit None is not checked), when an admission finds the
scope already reached or its run limit full, or when an ask of its revision was denied or
expired (the scope is closed for the period). The first blocking budget, in the coverage's
sorted order, answers: ``on_exceed: stop`` or a closed scope -> STOP; ``on_exceed: ask`` ->
WAIT on the open ask, or on a new one (`AskToOpen`) the reservation then publishes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum

from nexus_events.events.budgets import BudgetDefinition, OnExceed, ask_id
from nexus_events.events.spend import (
    ScopeStanding,
    SpendDecision,
    SpendVerdict,
    StandingState,
)

from nexus_spend.coverage import Coverage

# The approval id of every ask under its pseudo-run (`budget-ask-…`): an ask asks one thing.
ASK_APPROVAL_ID = "extend"

# Floating-point sums of many call costs: a call landing exactly on the limit must fit.
_COST_SLACK = 1e-9


class AskState(StrEnum):
    """An ask's state (``spend.asks.state``): open until approved, denied or expired."""

    OPEN = "open"
    APPROVED = "approved"
    DENIED = "denied"
    EXPIRED = "expired"


CLOSED_ASK_STATES = frozenset({AskState.DENIED, AskState.EXPIRED})


@dataclass(frozen=True, slots=True)
class Usage:
    """Cost and tokens: settled, held, estimated or extended."""

    cost_usd: float = 0.0
    tokens: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(self.cost_usd + other.cost_usd, self.tokens + other.tokens)


@dataclass(frozen=True, slots=True)
class Extension:
    """What the approved asks of one (budget, instance, bucket) added."""

    cost_usd: float = 0.0
    tokens: int = 0
    runs: int = 0


@dataclass(frozen=True, slots=True)
class AskSeen:
    """An ask of one budget's scope instance and period (any revision)."""

    ask_id: str
    revision: int
    round: int
    state: AskState


@dataclass(frozen=True, slots=True)
class BudgetFacts:
    """What one covering budget is decided on. `held` is every hold on its key but the
    asking call's own (a resumed attempt replaces it); `runs` the runs admitted on its key
    but the asking run."""

    coverage: Coverage
    spent: Usage = Usage()
    held: Usage = Usage()
    runs: int = 0
    extension: Extension = Extension()
    asks: tuple[AskSeen, ...] = ()

    @property
    def budget(self) -> BudgetDefinition:
        return self.coverage.budget

    def open_ask(self) -> AskSeen | None:
        return next((a for a in self.asks if a.state is AskState.OPEN), None)

    def closed_ask(self) -> AskSeen | None:
        """A denied or expired ask of the budget's current revision: the scope is closed for
        the period (a new revision, applied again, opens it)."""
        revision = self.coverage.revision
        closed = [a for a in self.asks if a.state in CLOSED_ASK_STATES and a.revision == revision]
        return max(closed, key=lambda a: a.round) if closed else None

    def next_round(self) -> int:
        """The round of the next ask: one past every ask already decided (any revision, since
        the ask id does not name the revision)."""
        return 1 + max((a.round for a in self.asks), default=0)

    def limit_cost(self) -> float | None:
        cost = self.budget.limits.cost_usd
        return None if cost is None else cost + self.extension.cost_usd

    def limit_tokens(self) -> int | None:
        tokens = self.budget.limits.tokens
        return None if tokens is None else tokens + self.extension.tokens

    def limit_runs(self) -> int | None:
        runs = self.budget.limits.runs
        return None if runs is None else runs + self.extension.runs


@dataclass(frozen=True, slots=True)
class AskToOpen:
    """A new ask the reservation publishes once its transaction committed."""

    ask_id: str
    round: int
    facts: BudgetFacts


@dataclass(frozen=True, slots=True)
class Decision:
    verdict: SpendVerdict
    ask: AskToOpen | None = None
    blocking: BudgetFacts | None = field(default=None)


class Limit(StrEnum):
    """Which of a budget's limits a scope reached."""

    COST = "cost_usd"
    TOKENS = "tokens"
    RUNS = "runs"


@dataclass(frozen=True, slots=True)
class Reached:
    limit: Limit
    text: str  # ``$50.02 of $50.00``

    def extended_by(self, budget: BudgetDefinition) -> bool:
        """Whether an approval of the budget's ask raises this limit."""
        a = budget.ask
        return bool(
            {
                Limit.COST: a.extend_cost_usd,
                Limit.TOKENS: a.extend_tokens,
                Limit.RUNS: a.extend_runs,
            }[self.limit]
        )


def _over(used: Usage, facts: BudgetFacts, *, strict: bool) -> Reached | None:
    """Which cost or token limit `used` passes (None: within). `strict`: passing means above
    the limit (a call); else reaching it (admission)."""
    cost, tokens = facts.limit_cost(), facts.limit_tokens()
    if cost is not None and (
        used.cost_usd > cost + _COST_SLACK if strict else used.cost_usd >= cost - _COST_SLACK
    ):
        return Reached(Limit.COST, f"${used.cost_usd:,.2f} of ${cost:,.2f}")
    if tokens is not None and (used.tokens > tokens if strict else used.tokens >= tokens):
        return Reached(Limit.TOKENS, f"{used.tokens:,} of {tokens:,} tokens")
    return None


def _runs_full(facts: BudgetFacts) -> Reached | None:
    limit = facts.limit_runs()
    if limit is not None and facts.runs + 1 > limit:
        return Reached(Limit.RUNS, f"{facts.runs} of {limit} runs")
    return None


def scope_label(facts: BudgetFacts) -> str:
    """``budget alpha-monthly: team:alpha month 2026-11``."""
    key = facts.coverage.key
    return f"budget {facts.budget.id}: {key.instance} {key.period} {key.bucket}"


def standing(facts: BudgetFacts, *, own: Usage = Usage(), ask: str | None = None) -> ScopeStanding:
    """Where the budget's scope stands; `own` is a hold just granted (counted as reserved),
    `ask` an ask just opened (the scope is asking)."""
    held = facts.held + own
    open_ask, closed = facts.open_ask(), facts.closed_ask()
    ask_now = ask or (open_ask.ask_id if open_ask else None)
    if ask_now is not None:
        state = StandingState.ASKING
    elif closed is not None:
        state = StandingState.DENIED
    elif _over(facts.spent + held, facts, strict=False) or (
        facts.limit_runs() is not None and facts.runs >= (facts.limit_runs() or 0)
    ):
        state = StandingState.EXHAUSTED
    elif _past_warning(facts, facts.spent + held):
        state = StandingState.WARNING
    else:
        state = StandingState.OK
    key = facts.coverage.key
    return ScopeStanding(
        budget_id=facts.budget.id,
        instance=key.instance,
        period=facts.budget.period,
        bucket=key.bucket,
        on_exceed=facts.budget.on_exceed,
        state=state,
        spent_cost_usd=facts.spent.cost_usd,
        reserved_cost_usd=held.cost_usd,
        limit_cost_usd=facts.limit_cost(),
        spent_tokens=facts.spent.tokens,
        reserved_tokens=held.tokens,
        limit_tokens=facts.limit_tokens(),
        runs=facts.runs,
        limit_runs=facts.limit_runs(),
        ask_id=ask_now or (closed.ask_id if closed else None),
    )


def _past_warning(facts: BudgetFacts, used: Usage) -> bool:
    share = facts.budget.warn_at
    cost, tokens = facts.limit_cost(), facts.limit_tokens()
    if cost is not None and cost > 0 and used.cost_usd >= share * cost:
        return True
    return tokens is not None and tokens > 0 and used.tokens >= share * tokens


def decide_reserve(facts: Sequence[BudgetFacts], estimate: Usage) -> Decision:
    """A model call's reservation: granted when it fits every covering budget."""
    for f in facts:
        over = _over(f.spent + f.held + estimate, f, strict=True)
        closed = f.closed_ask() is not None and f.open_ask() is None
        if over is not None or closed:
            # What is reached is what is used: settled plus held (the estimate is not spent).
            shown = _over(f.spent + f.held, f, strict=False) or over
            return _refuse(facts, f, shown, over)
    scopes = [standing(f, own=estimate) for f in facts]
    return Decision(SpendVerdict(decision=SpendDecision.GRANTED, scopes=scopes))


def decide_admit(facts: Sequence[BudgetFacts]) -> Decision:
    """A run's admission: granted unless a covering scope is closed, already reached on cost
    or tokens, or its run limit is full."""
    for f in facts:
        closed = f.closed_ask() is not None and f.open_ask() is None
        reached = _over(f.spent + f.held, f, strict=False) or _runs_full(f)
        if reached is not None or closed:
            return _refuse(facts, f, reached, reached)
    scopes = [standing(f) for f in facts]
    return Decision(SpendVerdict(decision=SpendDecision.GRANTED, scopes=scopes))


def _refuse(
    facts: Sequence[BudgetFacts], f: BudgetFacts, reached: Reached | None, blocked: Reached | None
) -> Decision:
    """STOP or WAIT on the blocking budget `f`: `reached` is what the message shows, `blocked`
    the limit that refused (None: the scope is closed, not full)."""
    what = f"{scope_label(f)} reached ({reached.text})" if reached else f"{scope_label(f)} closed"
    open_ask = f.open_ask()
    closed = f.closed_ask()
    # An ask that would not raise the limit that refused would only be asked round after round.
    futile = blocked is not None and not blocked.extended_by(f.budget)
    if open_ask is None and (f.budget.on_exceed is OnExceed.STOP or closed is not None or futile):
        if closed is not None:
            what += f"; the ask to extend it was {closed.state} ({closed.ask_id})"
        elif futile and f.budget.on_exceed is OnExceed.ASK and blocked is not None:
            what += f"; its ask does not extend {blocked.limit}"
        return _verdict(facts, f, SpendDecision.STOP, what, None)
    if open_ask is not None:
        ask = open_ask.ask_id
        message = f"{what}; waiting for its approvers to extend it ({ask})"
        return _verdict(facts, f, SpendDecision.WAIT, message, ask)
    round_ = f.next_round()
    key = f.coverage.key
    new = AskToOpen(ask_id(f.budget.id, key.instance, key.bucket, round_), round_, f)
    message = f"{what}; asking its approvers to {extension_words(f)} ({new.ask_id})"
    decision = _verdict(facts, f, SpendDecision.WAIT, message, new.ask_id)
    return Decision(decision.verdict, new, f)


def _verdict(
    facts: Sequence[BudgetFacts],
    blocking: BudgetFacts,
    decision: SpendDecision,
    message: str,
    ask: str | None,
) -> Decision:
    scopes = [standing(f, ask=ask if f is blocking else None) for f in facts]
    block = scopes[list(facts).index(blocking)]
    verdict = SpendVerdict(
        decision=decision,
        scopes=scopes,
        blocking=block,
        message=message,
        ask_run_id=ask,
        ask_approval_id=ASK_APPROVAL_ID if ask else None,
    )
    return Decision(verdict, None, blocking)


def extension_words(f: BudgetFacts) -> str:
    """``extend team:alpha's budget alpha-monthly by $10.00 for 2026-11``."""
    a = f.budget.ask
    parts = []
    if a.extend_cost_usd:
        parts.append(f"${a.extend_cost_usd:,.2f}")
    if a.extend_tokens:
        parts.append(f"{a.extend_tokens:,} tokens")
    if a.extend_runs:
        parts.append(f"{a.extend_runs} runs")
    amounts = " and ".join(parts) if len(parts) < 3 else f"{parts[0]}, {parts[1]} and {parts[2]}"
    key = f.coverage.key
    return f"extend {key.instance}'s budget {f.budget.id} by {amounts} for {key.bucket}"


__all__ = [
    "ASK_APPROVAL_ID",
    "CLOSED_ASK_STATES",
    "AskSeen",
    "AskState",
    "AskToOpen",
    "BudgetFacts",
    "Decision",
    "Extension",
    "Limit",
    "Reached",
    "Usage",
    "decide_admit",
    "decide_reserve",
    "extension_words",
    "scope_label",
    "standing",
]
