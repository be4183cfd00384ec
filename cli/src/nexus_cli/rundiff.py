"""Two runs side by side from their events (`nexus diff`): pure, no I/O, unit-tested."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from nexus_events.contract.runstate import TERMINAL_EVENTS, RunEvent
from nexus_events.events import RunTurn, ToolCalled, ToolResult
from nexus_events.events.queries import RunEventView
from nexus_events.events.queries import RunView as RunRow
from pydantic import ValidationError

# How much of a call's arguments the table shows.
ARGS_SHOWN = 48


@dataclass(frozen=True)
class Call:
    """One tool call of a turn and what it returned (None: no result recorded)."""

    tool: str
    arguments: dict[str, Any]
    ok: bool | None = None
    output: str | None = None

    @property
    def short(self) -> str:
        """``tool(args)`` with the arguments cut to a table cell."""
        args = json.dumps(self.arguments, sort_keys=True, ensure_ascii=False)
        if len(args) > ARGS_SHOWN:
            args = args[: ARGS_SHOWN - 1] + "…"
        return f"{self.tool}({args})" + (" !" if self.ok is False else "")

    def as_dict(self) -> dict[str, Any]:
        return {"tool": self.tool, "arguments": self.arguments, "ok": self.ok}


@dataclass
class RunTrace:
    """What one run did, turn by turn, folded from its events."""

    run_id: str
    # turn -> call id -> call, in the order the calls were made (a resumed run may publish a
    # call again: the same id is the same call).
    calls: dict[int, dict[str, Call]] = field(default_factory=dict)
    started_at: datetime | None = None
    first_at: datetime | None = None
    ended_at: datetime | None = None
    model_turns: set[int] = field(default_factory=set)

    def turn_calls(self, turn: int) -> list[Call]:
        return list(self.calls.get(turn, {}).values())

    @property
    def wall_seconds(self) -> float | None:
        start = self.started_at or self.first_at
        if start is None or self.ended_at is None:
            return None
        return max((self.ended_at - start).total_seconds(), 0.0)


def fold_trace(run_id: str, events: list[RunEventView]) -> RunTrace:
    """The run's turns and calls from its events (stream order); malformed bodies are skipped."""
    trace = RunTrace(run_id)
    for e in events:
        trace.first_at = trace.first_at or e.time
        try:
            _apply(trace, e)
        except ValidationError:
            continue  # an event this CLI cannot read says nothing about turns
    return trace


def _apply(trace: RunTrace, e: RunEventView) -> None:
    if e.event == RunEvent.STARTED:
        trace.started_at = trace.started_at or e.time
    elif e.event == RunEvent.TURN:
        trace.model_turns.add(RunTurn.model_validate(e.body).turn)
    elif e.event == RunEvent.TOOL_CALLED:
        called = ToolCalled.model_validate(e.body)
        turn = trace.calls.setdefault(called.turn, {})
        previous = turn.get(called.call_id)
        turn[called.call_id] = Call(
            called.tool,
            called.arguments,
            previous.ok if previous else None,
            previous.output if previous else None,
        )
    elif e.event == RunEvent.TOOL_RESULT:
        result = ToolResult.model_validate(e.body)
        turn = trace.calls.setdefault(result.turn, {})
        known = turn.get(result.call_id, Call(result.tool, {}))
        turn[result.call_id] = Call(known.tool, known.arguments, result.ok, result.output)
    elif e.event in TERMINAL_EVENTS:
        trace.ended_at = e.time


@dataclass(frozen=True)
class TurnPair:
    """One turn of both runs: their calls, and whether calls and results match."""

    turn: int
    a: list[Call]
    b: list[Call]

    @property
    def calls_match(self) -> bool:
        return [(c.tool, c.arguments) for c in self.a] == [(c.tool, c.arguments) for c in self.b]

    @property
    def results_match(self) -> bool:
        return [(c.ok, c.output) for c in self.a] == [(c.ok, c.output) for c in self.b]

    @property
    def same(self) -> bool:
        return self.calls_match and self.results_match

    @property
    def verdict(self) -> str:
        if not self.calls_match:
            return "calls differ"
        return "same" if self.results_match else "results differ"

    def as_dict(self) -> dict[str, Any]:
        return {
            "number": self.turn,
            "a": [c.as_dict() for c in self.a],
            "b": [c.as_dict() for c in self.b],
            "calls_match": self.calls_match,
            "results_match": self.results_match,
        }


@dataclass(frozen=True)
class Total:
    """One total of both runs and B's difference from A (None when it is not a number)."""

    name: str
    a: Any
    b: Any

    @property
    def difference(self) -> float | None:
        numbers = (int, float)
        if isinstance(self.a, bool) or isinstance(self.b, bool):
            return None
        if isinstance(self.a, numbers) and isinstance(self.b, numbers):
            return round(self.b - self.a, 6)
        return None

    def as_dict(self) -> dict[str, Any]:
        return {"a": self.a, "b": self.b, "difference": self.difference}


@dataclass(frozen=True)
class RunDiff:
    a: str
    b: str
    turns: list[TurnPair]
    totals: list[Total]

    @property
    def first_difference(self) -> int | None:
        """The first turn whose calls or results differ (None: every turn matched)."""
        return next((p.turn for p in self.turns if not p.same), None)

    def as_dict(self) -> dict[str, Any]:
        return {
            "a": self.a,
            "b": self.b,
            "first_difference": self.first_difference,
            "turns": [p.as_dict() for p in self.turns],
            "totals": {t.name: t.as_dict() for t in self.totals},
        }


def compare(row_a: RunRow, trace_a: RunTrace, row_b: RunRow, trace_b: RunTrace) -> RunDiff:
    """Both runs turn by turn (every turn either made), then their totals."""
    numbers = set(trace_a.calls) | set(trace_b.calls) | trace_a.model_turns | trace_b.model_turns
    pairs = [TurnPair(n, trace_a.turn_calls(n), trace_b.turn_calls(n)) for n in sorted(numbers)]
    totals = [
        Total("turns", row_a.turns, row_b.turns),
        Total("tool calls", _count(trace_a), _count(trace_b)),
        Total("tokens in", row_a.tokens_in, row_b.tokens_in),
        Total("tokens out", row_a.tokens_out, row_b.tokens_out),
        Total("cost usd", round(row_a.cost_usd, 6), round(row_b.cost_usd, 6)),
        Total("wall seconds", _seconds(trace_a), _seconds(trace_b)),
        Total("outcome", _outcome(row_a), _outcome(row_b)),
    ]
    return RunDiff(row_a.run_id, row_b.run_id, pairs, totals)


def _count(trace: RunTrace) -> int:
    return sum(len(calls) for calls in trace.calls.values())


def _seconds(trace: RunTrace) -> float | None:
    wall = trace.wall_seconds
    return None if wall is None else round(wall, 3)


def _outcome(row: RunRow) -> str:
    status = row.status or "unknown"
    return f"{status} ({row.reason})" if row.reason else status
