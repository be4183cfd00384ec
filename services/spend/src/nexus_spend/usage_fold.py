"""The pure part of the usage fold: which model call an event is, what it adds when a call is
published again (the larger usage counts), and the batch's ledger deltas per key."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from nexus_events.events import RunCondensed, RunTurn
from nexus_events.events.base import Event

from nexus_spend.coverage import LedgerKey


@dataclass(frozen=True, slots=True)
class CallUsage:
    """What one model call used."""

    tokens_in: int = 0
    tokens_out: int = 0
    cost_usd: float = 0.0

    @property
    def tokens(self) -> int:
        return self.tokens_in + self.tokens_out

    def larger(self, other: CallUsage) -> CallUsage:
        """Field by field the larger: a resumed attempt's repeat of a call never lowers it."""
        return CallUsage(
            max(self.tokens_in, other.tokens_in),
            max(self.tokens_out, other.tokens_out),
            max(self.cost_usd, other.cost_usd),
        )

    def minus(self, other: CallUsage) -> CallUsage:
        return CallUsage(
            self.tokens_in - other.tokens_in,
            self.tokens_out - other.tokens_out,
            self.cost_usd - other.cost_usd,
        )

    def is_zero(self) -> bool:
        return self.tokens_in == 0 and self.tokens_out == 0 and self.cost_usd == 0


def turn_key(turn: int) -> str:
    return f"turn:{turn}"


def condensed_key(turn: int, strategy: str) -> str:
    return f"condensed:{turn}:{strategy}"


def model_call(event: Event) -> tuple[str, CallUsage] | None:
    """The call key and usage of a `turn` or a `condensed` summary call; None otherwise."""
    if isinstance(event, RunTurn):
        return turn_key(event.turn), CallUsage(event.tokens_in, event.tokens_out, event.cost_usd)
    if isinstance(event, RunCondensed):
        usage = CallUsage(event.llm_tokens_in, event.llm_tokens_out, event.cost_usd)
        return condensed_key(event.turn, event.condensation.strategy), usage
    return None


@dataclass(frozen=True, slots=True)
class Settled:
    """A call folded in: what is stored for it now, and what it adds to the totals."""

    stored: CallUsage
    delta: CallUsage
    new_call: bool  # the first time this call key is seen: one more call


def settle(old: CallUsage | None, new: CallUsage) -> Settled:
    """Fold a call published once more (or for the first time, `old` None)."""
    if old is None:
        return Settled(new, new, True)
    stored = old.larger(new)
    return Settled(stored, stored.minus(old), False)


@dataclass(slots=True)
class LedgerDelta:
    cost_usd: float = 0.0
    tokens: int = 0
    calls: int = 0


@dataclass(slots=True)
class LedgerDeltas:
    """A batch's additions to the ledger, summed per key, handed out in key order (the order
    reservations lock the same rows in: no deadlock)."""

    by_key: dict[LedgerKey, LedgerDelta] = field(default_factory=dict)

    def add(self, keys: Iterable[LedgerKey], settled: Settled) -> None:
        if settled.delta.is_zero() and not settled.new_call:
            return
        for key in keys:
            d = self.by_key.setdefault(key, LedgerDelta())
            d.cost_usd += settled.delta.cost_usd
            d.tokens += settled.delta.tokens
            d.calls += int(settled.new_call)

    def in_order(self) -> list[tuple[LedgerKey, LedgerDelta]]:
        return sorted(self.by_key.items(), key=lambda item: item[0])
