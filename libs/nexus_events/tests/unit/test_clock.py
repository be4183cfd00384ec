"""The injected clock: a manual one moves only when told to, and wakes the sleeps it passes."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

from nexus_events.runtime.clock import ManualClock

START = datetime(2026, 1, 1, tzinfo=UTC)


async def test_a_sleep_ends_only_once_the_clock_is_moved_past_it() -> None:
    clock = ManualClock(START)
    sleeping = asyncio.create_task(clock.sleep(30))
    await asyncio.sleep(0)
    assert clock.sleepers == 1
    clock.advance(29)
    await asyncio.sleep(0)
    assert not sleeping.done()
    clock.set(START + timedelta(seconds=30))
    await asyncio.wait_for(sleeping, 1)
    assert clock.sleepers == 0
    assert clock.now() == START + timedelta(seconds=30)


async def test_a_sleep_of_nothing_returns_at_once() -> None:
    clock = ManualClock(START)
    await asyncio.wait_for(clock.sleep(0), 1)
    assert clock.now() == START
