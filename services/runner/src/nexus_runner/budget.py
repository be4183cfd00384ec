"""Budgets (turns, tokens, cost, wall time) and stuck detection: pure bookkeeping."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from nexus_events.events.specs import Budgets

from nexus_runner.config import Price


def turn_cost(prices: Mapping[str, Price], model: str, tokens_in: int, tokens_out: int) -> float:
    price = prices.get(model)
    if price is None:
        return 0.0
    return (tokens_in * price.input_per_mtok + tokens_out * price.output_per_mtok) / 1_000_000


@dataclass
class Usage:
    turns: int = 0
    tokens_in: int = 0
    tokens_out: int = 0
    cost_usd: float = 0.0

    @property
    def tokens(self) -> int:
        return self.tokens_in + self.tokens_out


def exceeded(budgets: Budgets, usage: Usage, *, next_turn: bool) -> str | None:
    """Name of the budget `usage` is over (turns counted before starting another), or None."""
    if next_turn and usage.turns >= budgets.max_turns:
        return "max_turns"
    if usage.tokens > budgets.max_tokens:
        return "max_tokens"
    if usage.cost_usd > budgets.max_cost_usd:
        return "max_cost_usd"
    return None


@dataclass
class StuckDetector:
    """Stuck = the same call with the same result `repeat` times in a row, or `idle` turns
    in a row that did nothing new (no call or result not seen before)."""

    repeat: int
    idle: int
    _last: tuple[str, str, str] | None = None
    _streak: int = 0
    _seen: set[tuple[str, str, str]] = field(default_factory=set)
    _idle_turns: int = 0

    def record_call(self, tool: str, arguments: str, output: str) -> str | None:
        key = (tool, arguments, output)
        self._streak = self._streak + 1 if key == self._last else 1
        self._last = key
        if self._streak >= self.repeat:
            return f"the same {tool} call returned the same result {self._streak} times in a row"
        return None

    def record_turn(self, calls: list[tuple[str, str, str]]) -> str | None:
        new = [c for c in calls if c not in self._seen]
        self._seen.update(calls)
        self._idle_turns = 0 if new else self._idle_turns + 1
        if self._idle_turns >= self.idle:
            return f"{self._idle_turns} turns in a row without progress"
        return None
