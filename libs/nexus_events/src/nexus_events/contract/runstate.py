"""The run state machine of docs/design.md §5.1, as pure functions.

``requested -> prepared -> queued -> dispatched -> running -> completed | failed | cancelled |
timed_out | lost``; ``awaiting_approval`` and ``sleeping`` are sub-states of running. Terminal
states are final and a run never moves backwards, so projections can apply duplicates and late
events blindly.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from types import MappingProxyType


class RunStatus(StrEnum):
    REQUESTED = "requested"
    PREPARED = "prepared"
    QUEUED = "queued"
    DISPATCHED = "dispatched"
    RUNNING = "running"
    AWAITING_APPROVAL = "awaiting_approval"
    # Between attempts: the run slept (the `sleep` tool), holding no runner and no slot, and
    # its next attempt starts at the wake time or on a wake (docs/resume.md, Sleep).
    SLEEPING = "sleeping"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"
    TIMED_OUT = "timed_out"
    LOST = "lost"


TERMINAL: frozenset[RunStatus] = frozenset(
    {
        RunStatus.COMPLETED,
        RunStatus.FAILED,
        RunStatus.CANCELLED,
        RunStatus.TIMED_OUT,
        RunStatus.LOST,
    }
)

# The statuses of a run that has not ended (what an 'active runs' query asks for).
LIVE: frozenset[RunStatus] = frozenset(RunStatus) - TERMINAL


class RunEvent(StrEnum):
    """The name of each run event: the last token of its subject and its model's
    ``event_name`` (`nexus_events.events.runs` declares each model under one of these)."""

    REQUESTED = "requested"
    PREPARED = "prepared"
    QUEUED = "queued"
    DISPATCHED = "dispatched"
    STARTED = "started"
    HEARTBEAT = "heartbeat"
    TURN = "turn"
    TOOL_CALLED = "tool_called"
    TOOL_RESULT = "tool_result"
    APPROVAL_REQUESTED = "approval_requested"
    APPROVAL_DECIDED = "approval_decided"
    APPROVAL_REFUSED = "approval_refused"
    CANCEL_REQUESTED = "cancel_requested"
    RESUMING = "resuming"
    RESUMED = "resumed"
    CHECKPOINTED = "checkpointed"
    CONDENSED = "condensed"
    EGRESS = "egress"
    MCP_SERVER_UNAVAILABLE = "mcp_server_unavailable"
    # The lab (docs/lab.md): a replay's first divergence from its recording; a person marking
    # a finished run golden (an eval case) or taking the mark back.
    DIVERGED = "diverged"
    GOLDEN_MARKED = "golden_marked"
    # Budgets (docs/spend.md): a run paused because a budget covering it was reached and an
    # ask is open (it holds no scheduler slot meanwhile), and the run going on after it.
    BUDGET_PAUSED = "budget_paused"
    BUDGET_RESUMED = "budget_resumed"
    # Sleep (docs/resume.md): an attempt that ended to wait until a time, and a person or
    # system asking a sleeping run to wake now (`nexus run wake`).
    SLEEPING = "sleeping"
    WAKE_REQUESTED = "wake_requested"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"
    TIMED_OUT = "timed_out"
    LOST = "lost"


# The status each run event implies: live ones apply only forwards (see `next_status`), so a
# `heartbeat` or `turn` means `running` only if the run had not got that far. `cancel_requested`
# implies none: it asks, and the run's own events (`cancelled`, or another ending) say what
# happened; until then the run is where it was. tests/unit/test_runstate.py checks that every
# registered run event is here. Keyed by `RunEvent`, looked up by plain `str` too (a subject's
# last token): a StrEnum member hashes and compares as its value.
EVENT_STATUS: Mapping[str, RunStatus | None] = MappingProxyType(
    {
        RunEvent.REQUESTED: RunStatus.REQUESTED,
        RunEvent.PREPARED: RunStatus.PREPARED,
        RunEvent.QUEUED: RunStatus.QUEUED,
        RunEvent.DISPATCHED: RunStatus.DISPATCHED,
        RunEvent.STARTED: RunStatus.RUNNING,
        RunEvent.HEARTBEAT: RunStatus.RUNNING,
        RunEvent.TURN: RunStatus.RUNNING,
        RunEvent.TOOL_CALLED: RunStatus.RUNNING,
        RunEvent.TOOL_RESULT: RunStatus.RUNNING,
        RunEvent.APPROVAL_REQUESTED: RunStatus.AWAITING_APPROVAL,
        RunEvent.APPROVAL_DECIDED: RunStatus.RUNNING,
        # An answer the approver policy refused: the audit record, the approval still waits.
        RunEvent.APPROVAL_REFUSED: None,
        RunEvent.CANCEL_REQUESTED: None,
        # The scheduler starts attempt n+1: the run stays where it was until that attempt
        # says `resumed` (which also ends an approval wait the dead attempt left open).
        RunEvent.RESUMING: None,
        RunEvent.RESUMED: RunStatus.RUNNING,
        RunEvent.CHECKPOINTED: RunStatus.RUNNING,
        RunEvent.CONDENSED: RunStatus.RUNNING,
        # An audit record of a network request of the tools: it moves no status (a tool's
        # background process may make one while the run awaits an approval).
        RunEvent.EGRESS: None,
        RunEvent.DIVERGED: None,
        RunEvent.GOLDEN_MARKED: None,
        RunEvent.MCP_SERVER_UNAVAILABLE: RunStatus.RUNNING,
        # A budget pause waits on people, as an approval does (the run shows awaiting_approval).
        RunEvent.BUDGET_PAUSED: RunStatus.AWAITING_APPROVAL,
        RunEvent.BUDGET_RESUMED: RunStatus.RUNNING,
        # The woken attempt's `resumed` moves it back to running.
        RunEvent.SLEEPING: RunStatus.SLEEPING,
        # Asks; the scheduler's `resuming` and the attempt's `resumed` say what happened.
        RunEvent.WAKE_REQUESTED: None,
        RunEvent.COMPLETED: RunStatus.COMPLETED,
        RunEvent.FAILED: RunStatus.FAILED,
        RunEvent.CANCELLED: RunStatus.CANCELLED,
        RunEvent.TIMED_OUT: RunStatus.TIMED_OUT,
        RunEvent.LOST: RunStatus.LOST,
    }
)

# The run events that end a run (each names its terminal status): the one list every reader
# of endings uses (consumer filters, followers, displays).
TERMINAL_EVENTS: tuple[RunEvent, ...] = tuple(RunEvent(s) for s in RunStatus if s in TERMINAL)
# The approval events toggle running <-> awaiting_approval (the one move between equal ranks).
# A resumed attempt starts running whatever the dead one was waiting for.
_TOGGLES = frozenset(
    {
        RunEvent.APPROVAL_REQUESTED,
        RunEvent.APPROVAL_DECIDED,
        RunEvent.RESUMED,
        RunEvent.BUDGET_PAUSED,
        RunEvent.BUDGET_RESUMED,
        RunEvent.SLEEPING,
    }
)

# Progress rank: a status change is applied only forwards. Running, awaiting_approval and
# sleeping share a rank because a run moves between them both ways.
_RANK = {
    RunStatus.REQUESTED: 0,
    RunStatus.PREPARED: 1,
    RunStatus.QUEUED: 2,
    RunStatus.DISPATCHED: 3,
    RunStatus.RUNNING: 4,
    RunStatus.AWAITING_APPROVAL: 4,
    RunStatus.SLEEPING: 4,
}


def _status(value: RunStatus | str) -> RunStatus:
    # A dict lookup: calling the enum by value costs a microsecond, and projections ask per event.
    return _BY_VALUE.get(value) or RunStatus(value)


_BY_VALUE: dict[str, RunStatus] = {s.value: s for s in RunStatus}


def live_rank(status: RunStatus | str) -> int:
    """Progress rank of a live status (running, awaiting_approval, sleeping share one); `KeyError`
    for a terminal status, which ranks above every live one and is compared by class."""
    return _RANK[_status(status)]


def is_terminal(status: RunStatus | str | None) -> bool:
    return status is not None and _status(status) in TERMINAL


def next_status(current: RunStatus | str | None, event_name: str) -> RunStatus | None:  # noqa: PLR0911
    """The status after `event_name`, or None if the event changes nothing.

    A terminal run never changes; a terminal event always wins over a live one; a live
    event never moves a run backwards (a late `queued` after `running` is ignored), except
    that `approval_requested`/`approval_decided` toggle between running and awaiting_approval.
    """
    target = EVENT_STATUS.get(event_name)
    if target is None:
        return None
    if current is None:
        return target
    now = _status(current)
    if now in TERMINAL:
        return None
    if target in TERMINAL:
        return target
    if _RANK[target] > _RANK[now]:
        return target
    if _RANK[target] == _RANK[now] and target is not now and event_name in _TOGGLES:
        return target
    return None
