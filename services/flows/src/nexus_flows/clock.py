"""Time as a dependency of the flows engine: the system clock in production, a manual one in
tests (the scheduler's `nexus_scheduler.clock` is the same shape)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Protocol


class Clock(Protocol):
    def now(self) -> datetime: ...


class SystemClock:
    def now(self) -> datetime:
        return datetime.now(UTC)


class ManualClock:
    """A clock that moves only when told to (due waits and gate expiries fire on `advance`)."""

    def __init__(self, start: datetime | None = None) -> None:
        self._now = start or datetime.now(UTC)

    def now(self) -> datetime:
        return self._now

    def advance(self, seconds: float) -> datetime:
        self._now += timedelta(seconds=seconds)
        return self._now


__all__ = ["Clock", "ManualClock", "SystemClock"]
