"""Sleep (issue 42), pure: a sleeping run holds no slot, wakes once (timer, signal, message
after the sleep), goes back to the queue in its place, starts with its wake; the attempts
that slept are not spent, the time asleep is not on the deadline; the snapshot keeps all."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from nexus_events.events import (
    CancelRequested,
    InboxMessage,
    RunDispatched,
    RunHeartbeat,
    RunResuming,
    RunSleeping,
    RunStarted,
    RunWakeRequested,
    WakeCause,
)
from nexus_scheduler.admission import (
    AdmissionState,
    CancelWaiting,
    Expire,
    Limits,
    Lose,
    Phase,
    Resume,
    Start,
    Timeouts,
    after_loss,
    decide,
    due,
)
from nexus_scheduler.sleep import WakeUp, decide_wakes
from nexus_scheduler.snapshot import LifecycleFold

from ..factories import prepared

T0 = datetime(2026, 1, 1, tzinfo=UTC)
TIMEOUTS = Timeouts(cancel_grace=30, heartbeat_timeout=60, start_timeout=120)


def _at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def _asleep(max_attempts: int = 1, wall_seconds: int = 100) -> AdmissionState:
    """Run `r` ran from T0, slept at T0 + 50 s until T0 + 1050 s; `q` was prepared after it."""
    state = AdmissionState()
    state.evolve("r", prepared("r", max_attempts=max_attempts, wall_seconds=wall_seconds), T0)
    state.begin_start("r")
    state.evolve("r", RunDispatched(runtime="noop", handle="r"), T0)
    state.evolve("r", RunStarted(), _at(1))
    state.evolve("q", prepared("q"), _at(2))
    sleeping = RunSleeping(until=_at(1050), reason="CI", attempt=1, turn=4)
    assert state.evolve("r", sleeping, _at(50), stamp=_at(50))
    assert not state.evolve("r", sleeping, _at(51), stamp=_at(50))  # once
    return state


def _wake(state: AdmissionState, now: datetime) -> WakeUp:
    [wake] = decide_wakes(state, now)
    assert isinstance(wake, WakeUp)
    event = RunResuming(attempt=wake.attempt, reason="woke", wake=wake.wake)
    assert state.evolve("r", event, now)
    return wake


def test_a_sleeping_run_holds_no_slot_and_late_beats_do_not_take_one() -> None:
    state = _asleep()
    assert state.runs["r"].phase is Phase.SLEEPING
    assert state.active_total == 0
    assert not state.evolve("r", RunHeartbeat(seq=9), _at(60))
    assert state.active_total == 0
    [start] = decide(state, Limits(global_max=1), _at(60))
    assert start == Start("q", state.runs["q"].config)
    assert due(state, _at(10_000), TIMEOUTS) == []  # neither deadline nor heartbeat


def test_the_timer_wakes_it_once_into_its_place_in_the_queue() -> None:
    state = _asleep()
    assert decide_wakes(state, _at(1049)) == []
    wake = _wake(state, _at(1050))
    assert (wake.attempt, wake.wake.cause, wake.wake.sleep_reason) == (2, WakeCause.TIMER, "CI")
    assert decide_wakes(state, _at(2000)) == []
    # A signal after the wake changes nothing; a beat of the slept attempt neither.
    assert not state.evolve("r", RunWakeRequested(reason="now"), _at(1051))
    assert not state.evolve("r", RunHeartbeat(seq=9), _at(1051))
    entry = state.runs["r"]
    assert entry.phase is Phase.QUEUED
    assert state.queue() == ["r", "q"]  # prepared before q
    [start, _] = decide(state, Limits(global_max=2), _at(1051))
    assert start == Start("r", entry.attempt_config())
    assert start.config.attempt == 2
    assert start.config.wake == wake.wake


def test_a_signal_or_a_later_message_wakes_it_first_and_the_first_wins() -> None:
    state = _asleep()
    assert not state.message("r", InboxMessage(text="old", sender="bob"), _at(49))
    assert decide_wakes(state, _at(60)) == []
    assert state.message("r", InboxMessage(text="done", sender="bob"), _at(70))
    assert not state.evolve("r", RunWakeRequested(reason="second"), _at(71))
    wake = _wake(state, _at(72))
    assert (wake.wake.cause, wake.wake.text, wake.wake.requested_by) == (
        WakeCause.MESSAGE,
        "done",
        "bob",
    )


def test_a_wake_asked_before_the_sleep_changes_nothing() -> None:
    state = AdmissionState()
    state.evolve("r", prepared("r"), T0)
    state.begin_start("r")
    state.evolve("r", RunDispatched(runtime="noop", handle="r"), T0)
    assert not state.evolve("r", RunWakeRequested(reason="early"), _at(1))
    state.evolve("r", RunSleeping(until=_at(100), reason="", attempt=1, turn=0), _at(2))
    assert decide_wakes(state, _at(50)) == []


def test_a_cancel_of_a_sleeping_run_ends_it() -> None:
    state = _asleep()
    state.evolve("r", CancelRequested(requested_by="ann"), _at(60))
    [cancel] = decide_wakes(state, _at(60))
    assert isinstance(cancel, CancelWaiting)
    assert decide_wakes(state, _at(2000)) == []  # decided once


def test_attempts_that_slept_are_not_spent_and_sleep_is_not_on_the_deadline() -> None:
    state = _asleep(max_attempts=1, wall_seconds=100)
    _wake(state, _at(1050))
    state.begin_start("r")
    state.evolve("r", RunDispatched(runtime="noop", handle="r", attempt=2), _at(1060))
    entry = state.runs["r"]
    assert entry.paused_seconds == 1010  # slept at 50, dispatched again at 1060
    # Ran 50 s before the sleep: 50 s are left, from 1060.
    assert due(state, _at(1109), TIMEOUTS) == []
    assert due(state, _at(1110), TIMEOUTS) == [Expire("r", 100)]
    # Attempt 2 is the first that counts: losing it spends the one attempt.
    loss = after_loss(entry, "heartbeat_missing", "gone")
    assert isinstance(loss, Lose)
    assert "after 1 of 1 attempts" in loss.message


def test_a_loss_after_a_wake_resumes_without_the_wake() -> None:
    state = _asleep(max_attempts=2)
    _wake(state, _at(1050))
    state.begin_start("r")
    state.evolve("r", RunDispatched(runtime="noop", handle="r", attempt=2), _at(1060))
    assert after_loss(state.runs["r"], "runtime_gone", "x") == Resume("r", 3, "runtime_gone", "x")
    state.evolve("r", RunResuming(attempt=3, reason="runtime_gone"), _at(1100))
    assert state.runs["r"].attempt_config().wake is None


def test_the_snapshot_keeps_the_sleep_and_the_wake_asked() -> None:
    state = _asleep(max_attempts=2)
    state.evolve("r", RunWakeRequested(reason="go", requested_by="ann"), _at(60))
    restored = LifecycleFold.from_snapshot(LifecycleFold(state).snapshot(None)).state
    assert restored.sleeping == {"r"}
    assert restored.active_total == 0
    entry = restored.runs["r"]
    assert entry.sleep == state.runs["r"].sleep
    assert (entry.asleep_since, entry.slept_attempts) == (_at(50), 1)
    [wake] = decide_wakes(restored, _at(61))
    assert isinstance(wake, WakeUp)
    assert (wake.wake.cause, wake.wake.text) == (WakeCause.SIGNAL, "go")
