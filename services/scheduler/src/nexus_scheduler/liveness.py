"""When a run whose runtime is not live may be ended: pure decisions, an injectable `now`.

A runtime that reports the run PENDING or RUNNING keeps it (after a scheduler restart that is
a re-adoption). One that saw the process end (EXITED, FAILED, TIMED_OUT) gets ``exit_grace``
for the runner's own terminal event. GONE means the runtime has no record of the run, which
after a restart is no proof the runner died (a remote runner, a pid file that could not be
read): it is ended only once no heartbeat came for the heartbeat window, counted from the last
heartbeat seen or from when this scheduler began to lead, whichever is later.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from nexus_scheduler.runtime.base import LIVE_STATES, RuntimeState


@dataclass(frozen=True)
class Windows:
    exit_grace: float
    heartbeat_timeout: float


def end_at(
    state: RuntimeState,
    *,
    not_live_since: datetime,
    last_seen: datetime | None,
    leader_since: datetime,
    windows: Windows,
) -> datetime | None:
    """The earliest time the run may be ended for its runtime state; None while it lives."""
    if state in LIVE_STATES:
        return None
    if state is RuntimeState.GONE:
        base = leader_since if last_seen is None else max(last_seen, leader_since)
        return base + timedelta(seconds=windows.heartbeat_timeout)
    return not_live_since + timedelta(seconds=windows.exit_grace)


def may_end(
    state: RuntimeState,
    now: datetime,
    *,
    not_live_since: datetime,
    last_seen: datetime | None,
    leader_since: datetime,
    windows: Windows,
) -> bool:
    at = end_at(
        state,
        not_live_since=not_live_since,
        last_seen=last_seen,
        leader_since=leader_since,
        windows=windows,
    )
    return at is not None and now >= at
