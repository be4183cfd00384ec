"""When a run whose runtime is not live may be ended (re-adopt vs lost), on a manual clock."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from nexus_events.runtime.clock import ManualClock
from nexus_scheduler.liveness import Windows, end_at, may_end
from nexus_scheduler.runtime.base import RuntimeState

WINDOWS = Windows(exit_grace=10, heartbeat_timeout=90)
T0 = datetime(2026, 11, 22, 18, 0, tzinfo=UTC)


@pytest.mark.parametrize("state", [RuntimeState.RUNNING, RuntimeState.PENDING])
def test_a_live_runtime_is_never_ended(state: RuntimeState) -> None:
    # However old the last heartbeat, a live runtime re-adopts the run (heartbeat silence
    # is the heartbeat rule's business, not this one's).
    clock = ManualClock(T0)
    clock.advance(10_000)
    assert (
        end_at(
            state,
            not_live_since=T0,
            last_seen=T0 - timedelta(hours=1),
            leader_since=T0,
            windows=WINDOWS,
        )
        is None
    )
    assert not may_end(
        state, clock.now(), not_live_since=T0, last_seen=None, leader_since=T0, windows=WINDOWS
    )


def test_gone_after_a_restart_waits_the_heartbeat_window_from_leadership() -> None:
    clock = ManualClock(T0)
    leader_since = clock.now()
    last_seen = T0 - timedelta(seconds=300)  # replayed: long before this scheduler led

    def check() -> bool:
        return may_end(
            RuntimeState.GONE,
            clock.now(),
            not_live_since=leader_since,
            last_seen=last_seen,
            leader_since=leader_since,
            windows=WINDOWS,
        )

    assert not check()
    clock.advance(89)
    assert not check()
    clock.advance(1)
    assert check()


def test_gone_counts_from_the_last_heartbeat_when_it_is_later() -> None:
    clock = ManualClock(T0)
    leader_since = T0
    clock.advance(60)
    last_seen = clock.now()  # a live heartbeat after the restart
    kwargs = {"not_live_since": T0, "last_seen": last_seen, "leader_since": leader_since}
    clock.advance(89)
    assert not may_end(RuntimeState.GONE, clock.now(), windows=WINDOWS, **kwargs)
    clock.advance(1)
    assert may_end(RuntimeState.GONE, clock.now(), windows=WINDOWS, **kwargs)


def test_gone_without_any_heartbeat_counts_from_leadership() -> None:
    assert end_at(
        RuntimeState.GONE, not_live_since=T0, last_seen=None, leader_since=T0, windows=WINDOWS
    ) == T0 + timedelta(seconds=90)


@pytest.mark.parametrize(
    "state", [RuntimeState.EXITED, RuntimeState.FAILED, RuntimeState.TIMED_OUT]
)
def test_an_ended_process_gets_the_exit_grace_only(state: RuntimeState) -> None:
    clock = ManualClock(T0)
    seen_ended = clock.advance(30)
    kwargs = {"not_live_since": seen_ended, "last_seen": T0, "leader_since": T0}
    clock.advance(9)
    assert not may_end(state, clock.now(), windows=WINDOWS, **kwargs)
    clock.advance(1)
    assert may_end(state, clock.now(), windows=WINDOWS, **kwargs)
