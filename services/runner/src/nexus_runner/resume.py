"""What attempt n+1 of a run goes on from (docs/resume.md): the run's history in NEXUS_RUNS
(usage, plan mode, the last checkpoint, the tool ledger, where earlier attempts resumed) and
its folded transcript; and what to do with the tool calls the dead attempt left unanswered.

A call is run again only when running it twice does no harm (`idempotent`: reads, and
write_file/edit_file, whose workspace was restored to before them); any other call is
answered with a note that its effect is unknown, so the model checks before repeating it.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from nexus_events.contract import run_access
from nexus_events.contract.codec import Envelope
from nexus_events.contract.streams import RUNS
from nexus_events.events.runs import (
    ApprovalDecided,
    ApprovalRequested,
    RunCheckpointed,
    RunDispatched,
    RunResumed,
    RunResuming,
    RunSleeping,
    RunStarted,
    RunTurn,
    TerminalEvent,
    ToolCalled,
    ToolResult,
)
from nexus_events.transport.bus import Bus

from nexus_runner.budget import Usage
from nexus_runner.llm import ToolCallRequest
from nexus_runner.plan import EXIT_PLAN_MODE
from nexus_runner.transcript import Folded, ResumeFailedError, fold, read_entries

__all__ = ["History", "PendingCall", "ResumeFailedError", "Resumption", "interrupted_note"]


@dataclass
class History:
    """What NEXUS_RUNS says about a run's earlier attempts."""

    usage: Usage = field(default_factory=Usage)
    plan_approved: bool = False
    checkpoint: RunCheckpointed | None = None
    called: dict[str, ToolCalled] = field(default_factory=dict)
    results: dict[str, ToolResult] = field(default_factory=dict)
    starts: dict[int, int] = field(default_factory=dict)  # attempt -> resumed.entries
    first_started: datetime | None = None
    last_sign_ns: int | None = None  # stream time of the last event a runner published
    ended: bool = False  # a terminal event: this attempt is a retry, not a resume
    plans: set[str] = field(default_factory=set)  # approval ids of exit_plan_mode
    # Sleep (docs/resume.md): when each attempt that slept published `sleeping`, when each
    # attempt was dispatched, and when the scheduler woke the run for an attempt (its
    # `resuming` with a wake): the time asleep is off the wall clock, as the scheduler's.
    slept_at: dict[int, datetime] = field(default_factory=dict)
    dispatched_at: dict[int, datetime] = field(default_factory=dict)
    woken_ns: dict[int, int] = field(default_factory=dict)

    @property
    def unfinished_calls(self) -> list[str]:
        """The ledger: calls with an intent (called) and no outcome (result)."""
        return [c for c in self.called if c not in self.results]

    def add(self, event: object, env: Envelope) -> None:
        if env.source == "runner" and env.timestamp_ns is not None:
            self.last_sign_ns = env.timestamp_ns
        if isinstance(event, RunTurn):
            self.usage.turns += 1
            self.usage.tokens_in += event.tokens_in
            self.usage.tokens_out += event.tokens_out
            self.usage.cost_usd += event.cost_usd
        elif isinstance(event, RunStarted):
            if self.first_started is None:
                self.first_started = env.timestamp
        elif isinstance(event, RunCheckpointed):
            self.checkpoint = event
        elif isinstance(event, ToolCalled):
            self.called[event.call_id] = event
        elif isinstance(event, ToolResult):
            self.results[event.call_id] = event
        elif isinstance(event, RunResumed):
            self.starts[event.attempt] = event.entries
        elif isinstance(event, (ApprovalRequested, ApprovalDecided)):
            self._plan(event)
        elif isinstance(event, TerminalEvent):
            self.ended = True
        else:
            self._sleep(event, env)

    def _sleep(self, event: object, env: Envelope) -> None:
        if env.timestamp is None:
            return
        if isinstance(event, RunSleeping):
            self.slept_at.setdefault(event.attempt, env.timestamp)
        elif isinstance(event, RunDispatched):
            self.dispatched_at.setdefault(event.attempt, env.timestamp)
        elif isinstance(event, RunResuming) and event.wake is not None:
            assert env.timestamp_ns is not None  # with the timestamp
            self.woken_ns.setdefault(event.attempt, env.timestamp_ns)

    def asleep(self, now: datetime) -> timedelta:
        """Time the run slept: from each `sleeping` to the dispatch of the attempt after it
        (the scheduler counts the same span), or to `now` if that is not recorded."""
        total = timedelta()
        for attempt, at in self.slept_at.items():
            woke = min((t for a, t in self.dispatched_at.items() if a > attempt), default=now)
            total += max(timedelta(), woke - at)
        return total

    def _plan(self, event: ApprovalRequested | ApprovalDecided) -> None:
        """Plan mode was lifted once an exit_plan_mode approval was approved."""
        if isinstance(event, ApprovalRequested):
            if event.tool == EXIT_PLAN_MODE:
                self.plans.add(event.approval_id)
        elif event.approval_id in self.plans and event.decision == "approved":
            self.plan_approved = True


async def read_history(bus: Bus, run_id: str, attempt: int) -> History:
    history = History()
    name = run_access.history_replay(run_id, attempt).name
    async for decoded in bus.replay(RUNS, run_id=run_id, name=name):
        history.add(decoded.event, decoded.envelope)
    return history


@dataclass(frozen=True)
class PendingCall:
    """A tool call of the last assistant message that has no tool message."""

    call: ToolCallRequest
    rerun: bool
    result: ToolResult | None = None  # its outcome in the events, when only that survived
    # Calls run one after another: only the first unanswered one can have been running.
    maybe_started: bool = True


def pending_calls(
    messages: list[dict[str, Any]],
    idempotent: Callable[[str], bool],
    results: dict[str, ToolResult],
) -> list[PendingCall]:
    """The calls the dead attempt left unanswered, in order, each judged re-runnable or not."""
    last = next(
        (i for i in range(len(messages) - 1, -1, -1) if _role(messages[i]) == "assistant"), None
    )
    if last is None:
        return []
    answered = {m.get("tool_call_id") for m in messages[last + 1 :] if _role(m) == "tool"}
    out: list[PendingCall] = []
    for raw in messages[last].get("tool_calls") or []:
        function = raw.get("function") or {}
        call = ToolCallRequest(
            id=str(raw.get("id", "")),
            name=str(function.get("name", "")),
            arguments=str(function.get("arguments", "")),
        )
        if call.id in answered:
            continue
        result = results.get(call.id)
        started = not out or result is not None
        out.append(PendingCall(call, idempotent(call.name), result, started))
    return out


def _role(message: dict[str, Any]) -> str:
    return str(message.get("role", ""))


def interrupted_note(pending: PendingCall) -> str:
    """The tool message for a call not run again."""
    if not pending.maybe_started:
        return (
            f"not run: the runner was lost before this `{pending.call.name}` call started, so"
            " it had no effect. The workspace was restored to the last checkpoint; check the"
            " current state, then run it again if it is still needed."
        )
    if pending.result is not None:
        state = "succeeded" if pending.result.ok else "failed"
        recorded = json.dumps(pending.result.output)
        return (
            f"interrupted: this `{pending.call.name}` call {state} but the runner was lost"
            " before its full output was recorded; the workspace was restored to the last"
            f" checkpoint, which may not include its effect. Recorded output (cut): {recorded}."
            " Check the current state before repeating it."
        )
    return (
        f"interrupted: the runner was lost while this `{pending.call.name}` call ran; its"
        " effect is unknown. The workspace was restored to the last checkpoint (taken after"
        " the last tool call that changed files). Check the current state before repeating it."
    )


@dataclass
class Resumption:
    """What attempt `attempt` restores: built by `Resumption.read` before the runner starts."""

    attempt: int
    history: History
    folded: Folded
    read_ns: int = field(default_factory=time.time_ns)

    @property
    def fresh(self) -> bool:
        """Nothing to go on from: start the conversation from the beginning (the run died
        before its first model call, or an earlier attempt ended and this one is a retry)."""
        return self.history.ended or not self.folded.messages

    @classmethod
    async def read(cls, bus: Bus, run_id: str, attempt: int) -> Resumption:
        history = await read_history(bus, run_id, attempt)
        if history.ended:
            return cls(attempt, history, Folded())
        folded = fold(await read_entries(bus, run_id, attempt), history.starts)
        if folded.entries == 0 and history.usage.turns > 0:
            raise ResumeFailedError(
                f"the run's transcript is missing ({history.usage.turns} model turns were"
                " recorded): it may have expired (NEXUS_STREAMS_TRANSCRIPTS_MAX_AGE_DAYS)"
            )
        return cls(attempt, history, folded)

    @property
    def usage(self) -> Usage:
        """Budgets count across attempts; a retry after an ending starts afresh."""
        return Usage() if self.history.ended else self.history.usage

    @property
    def latency_ms(self) -> int | None:
        """From the old attempt's last sign of life; for an attempt woken from a sleep, from
        the wake (the sleep itself is no latency)."""
        last = self.history.woken_ns.get(self.attempt, self.history.last_sign_ns)
        return None if last is None else max(0, (time.time_ns() - last) // 1_000_000)

    def remaining_wall(self, limit: float, now: datetime) -> float:
        """Seconds of the wall-clock budget left at `now`: counted from the run's first start,
        less the time it slept."""
        started = self.history.first_started
        if started is None or self.history.ended:
            return limit
        return limit - (now - started - self.history.asleep(now)).total_seconds()

    def resumed(self, checkpoint: str | None, pending: list[PendingCall]) -> RunResumed:
        turns = 0 if self.fresh else self.usage.turns
        return RunResumed(
            attempt=self.attempt,
            turns=turns,
            messages=len(self.folded.messages),
            entries=self.folded.entries,
            checkpoint=checkpoint,
            rerun_calls=[p.call.id for p in pending if p.rerun],
            interrupted_calls=[p.call.id for p in pending if not p.rerun],
            latency_ms=self.latency_ms,
        )
