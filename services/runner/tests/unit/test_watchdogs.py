"""Heartbeats and the wall-clock budget on a manual clock: no real time passes."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from nexus_events.events.runs import Reason, RunHeartbeat
from nexus_events.runtime.clock import ManualClock

from nexus_runner.errors import RunnerError
from nexus_runner.loop import AgentLoop
from nexus_runner.resume import History, Resumption
from nexus_runner.transcript import Folded
from nexus_runner.watchdogs import RunHandle, heartbeats, wall_clock

START = datetime(2026, 1, 1, tzinfo=UTC)


async def settled(check: Callable[[], bool]) -> None:
    """Let the other tasks run until `check` holds (they wait on the manual clock, not on
    time, so a bounded number of event-loop rounds is enough)."""
    for _ in range(100):
        if check():
            return
        await asyncio.sleep(0)
    raise AssertionError("the tasks did not settle")


async def test_a_sleep_ends_only_once_the_clock_passes_it() -> None:
    clock = ManualClock(START)
    sleep = asyncio.create_task(clock.sleep(5))
    await settled(lambda: clock.sleepers == 1)
    clock.advance(4.9)
    await settled(lambda: clock.sleepers == 1)
    assert not sleep.done()
    clock.advance(0.1)
    await asyncio.wait_for(sleep, 1)
    assert clock.sleepers == 0
    assert clock.now() == START + timedelta(seconds=5)
    await clock.sleep(0)  # nothing to wait for: returns at once


async def test_heartbeats_count_each_interval_until_done() -> None:
    clock = ManualClock(START)
    beats: list[RunHeartbeat] = []

    async def publish(beat: RunHeartbeat) -> None:
        beats.append(beat)

    done = asyncio.Event()
    loop_ref: list[AgentLoop | None] = [None]
    task = asyncio.create_task(heartbeats(publish, 5, loop_ref, done, clock))
    await settled(lambda: clock.sleepers == 1)
    clock.advance(4)
    await settled(lambda: clock.sleepers == 1)
    assert beats == []
    for expected in (1, 2):
        clock.advance(5)
        await settled(lambda n=expected: len(beats) == n and clock.sleepers == 1)
    assert [(b.seq, b.turn, b.phase) for b in beats] == [(1, 0, "preparing"), (2, 0, "preparing")]
    done.set()
    clock.advance(5)
    await asyncio.wait_for(task, 1)
    assert len(beats) == 2  # none once the run is done


async def test_a_heartbeat_that_cannot_be_published_does_not_stop_the_next() -> None:
    clock = ManualClock(START)
    tried: list[int] = []

    async def publish(beat: RunHeartbeat) -> None:
        tried.append(beat.seq)
        if beat.seq == 1:
            raise RunnerError("the bus is gone for a moment")

    done = asyncio.Event()
    task = asyncio.create_task(heartbeats(publish, 1, [None], done, clock))
    for expected in (1, 2):
        await settled(lambda: clock.sleepers == 1)
        clock.advance(1)
        await settled(lambda n=expected: len(tried) == n)
    assert tried == [1, 2]
    done.set()
    clock.advance(1)
    await asyncio.wait_for(task, 1)


async def test_the_wall_clock_stops_the_run_when_its_budget_is_spent() -> None:
    clock = ManualClock(START)
    handle = RunHandle()
    watchdog = asyncio.create_task(wall_clock(30, 60, handle, clock))
    await settled(lambda: clock.sleepers == 1)
    clock.advance(29.5)
    await settled(lambda: clock.sleepers == 1)
    assert handle.stop_reason is None
    clock.advance(0.5)
    await asyncio.wait_for(watchdog, 1)
    stopped = handle.stop_reason
    assert stopped is not None
    assert (stopped.status, stopped.reason) == ("failed", Reason.BUDGET_EXCEEDED)
    assert stopped.detail == {"budget": "max_wall_seconds", "limit": 60}
    assert "limit 60" in stopped.message


async def test_a_spent_budget_stops_the_run_at_once() -> None:
    clock = ManualClock(START)
    handle = RunHandle()
    await asyncio.wait_for(wall_clock(-3, 60, handle, clock), 1)
    assert handle.stop_reason is not None
    assert handle.stop_reason.reason == Reason.BUDGET_EXCEEDED


def test_a_resumed_run_has_what_is_left_of_its_wall_budget_at_the_clocks_time() -> None:
    resumption = Resumption(2, History(first_started=START), Folded())
    assert resumption.remaining_wall(60, START + timedelta(seconds=45)) == 15
    assert resumption.remaining_wall(60, START + timedelta(seconds=75)) == -15
    ended = Resumption(2, History(first_started=START, ended=True), Folded())
    assert ended.remaining_wall(60, START + timedelta(seconds=75)) == 60  # a retry starts afresh
