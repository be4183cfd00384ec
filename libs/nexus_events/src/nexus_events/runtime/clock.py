"""Time as a dependency of decisions: the system clock in production, a manual one in tests.

The scheduler's admission and liveness, the flows engine's timers and gates, and a run's
watchdogs (heartbeats, the wall-clock budget) read `now()` from an injected clock; a test
moves a `ManualClock` instead of sleeping on the real one.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Protocol


class Clock(Protocol):
    """What a decision reads: the current time (aware, UTC)."""

    def now(self) -> datetime: ...


class SleepingClock(Clock, Protocol):
    """A clock that can also be waited on (a run's watchdogs)."""

    async def sleep(self, seconds: float) -> None: ...


class SystemClock:
    def now(self) -> datetime:
        return datetime.now(UTC)

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


SYSTEM_CLOCK = SystemClock()


class ManualClock:
    """A clock that moves only when told to; a sleep ends once the clock is moved past it."""

    def __init__(self, start: datetime | None = None) -> None:
        self._now = start or datetime.now(UTC)
        self._sleepers: list[tuple[datetime, asyncio.Future[None]]] = []

    def now(self) -> datetime:
        return self._now

    @property
    def sleepers(self) -> int:
        """How many sleeps are waiting for the clock to move (a test waits for a watchdog)."""
        return len(self._sleepers)

    async def sleep(self, seconds: float) -> None:
        if seconds <= 0:
            await asyncio.sleep(0)  # still a suspension point, as asyncio.sleep(0) is
            return
        sleeper = (
            self._now + timedelta(seconds=seconds),
            asyncio.get_running_loop().create_future(),
        )
        self._sleepers.append(sleeper)
        try:
            await sleeper[1]
        finally:
            self._sleepers.remove(sleeper)

    def advance(self, seconds: float) -> datetime:
        return self.set(self._now + timedelta(seconds=seconds))

    def set(self, when: datetime) -> datetime:
        self._now = when
        for wake, woken in self._sleepers:
            if wake <= self._now and not woken.done():
                woken.set_result(None)
        return self._now


__all__ = ["SYSTEM_CLOCK", "Clock", "ManualClock", "SleepingClock", "SystemClock"]
