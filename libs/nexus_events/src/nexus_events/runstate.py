"""The run state machine of DESIGN.md section 5, as pure functions.

``requested -> prepared -> queued -> dispatched -> running -> completed | failed | cancelled |
timed_out | lost``; ``awaiting_approval`` is a sub-state of running. Terminal states are final
and a run never moves backwards, so projections can apply duplicates and late events blindly.
"""

from __future__ import annotations

from enum import StrEnum


class RunStatus(StrEnum):
    REQUESTED = "requested"
    PREPARED = "prepared"
    QUEUED = "queued"
    DISPATCHED = "dispatched"
    RUNNING = "running"
    AWAITING_APPROVAL = "awaiting_approval"
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

# The run events that end a run (each names its terminal status): the one list every reader
# of endings uses (consumer filters, followers, displays).
TERMINAL_EVENTS: tuple[str, ...] = (
    RunStatus.COMPLETED.value,
    RunStatus.FAILED.value,
    RunStatus.CANCELLED.value,
    RunStatus.TIMED_OUT.value,
    RunStatus.LOST.value,
)

# Progress rank: a status change is applied only forwards. Running and awaiting_approval
# share a rank because a run moves between them both ways.
_RANK = {
    RunStatus.REQUESTED: 0,
    RunStatus.PREPARED: 1,
    RunStatus.QUEUED: 2,
    RunStatus.DISPATCHED: 3,
    RunStatus.RUNNING: 4,
    RunStatus.AWAITING_APPROVAL: 4,
}

# Which status a run event implies; events absent here (turn, tool_called, heartbeat...)
# imply `running` only if the run had not got that far.
_EVENT_STATUS = {
    "requested": RunStatus.REQUESTED,
    "prepared": RunStatus.PREPARED,
    "queued": RunStatus.QUEUED,
    "dispatched": RunStatus.DISPATCHED,
    "started": RunStatus.RUNNING,
    "heartbeat": RunStatus.RUNNING,
    "turn": RunStatus.RUNNING,
    "tool_called": RunStatus.RUNNING,
    "tool_result": RunStatus.RUNNING,
    "approval_requested": RunStatus.AWAITING_APPROVAL,
    "approval_decided": RunStatus.RUNNING,
    "completed": RunStatus.COMPLETED,
    "failed": RunStatus.FAILED,
    "cancelled": RunStatus.CANCELLED,
    "timed_out": RunStatus.TIMED_OUT,
    "lost": RunStatus.LOST,
}


def _status(value: RunStatus | str) -> RunStatus:
    # A dict lookup: calling the enum by value costs a microsecond, and projections ask per event.
    return _BY_VALUE.get(value) or RunStatus(value)


_BY_VALUE: dict[str, RunStatus] = {s.value: s for s in RunStatus}


def live_rank(status: RunStatus | str) -> int:
    """Progress rank of a live status (running and awaiting_approval share one); `KeyError`
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
    target = _EVENT_STATUS.get(event_name)
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
    if _RANK[target] == _RANK[now] and target is not now and event_name.startswith("approval_"):
        return target
    return None
