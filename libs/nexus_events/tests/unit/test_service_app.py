"""`ServiceApp` start/stop over an exit stack: cleanups run in reverse order of start, a
start that fails part-way closes what had started, a failing cleanup does not skip the rest."""

from __future__ import annotations

import contextlib

import pytest
from nexus_events.runtime.process import ServiceApp


class Resource:
    """Something a service starts; records its start and close in a shared log."""

    def __init__(self, name: str, log: list[str], *, fail_start: bool = False) -> None:
        self.name = name
        self.log = log
        self.fail_start = fail_start
        self.fail_close = False

    async def start(self) -> None:
        if self.fail_start:
            raise OSError(f"{self.name} cannot start")
        self.log.append(f"start {self.name}")

    async def close(self) -> None:
        self.log.append(f"close {self.name}")
        if self.fail_close:
            raise RuntimeError(f"{self.name} cannot close")


class ThreeParts(ServiceApp):
    def __init__(self, log: list[str], *, failing: str | None = None) -> None:
        super().__init__("three-parts")
        self.parts = [Resource(n, log, fail_start=n == failing) for n in ("a", "b", "c")]
        self.readiness_at_close: list[bool] = []

    def ready(self) -> bool:
        return self._running

    async def open(self, stack: contextlib.AsyncExitStack) -> None:
        for part in self.parts:
            await part.start()
            stack.push_async_callback(part.close)
        stack.callback(lambda: self.readiness_at_close.append(self.ready()))


async def test_stop_unwinds_in_reverse_order_of_start():
    log: list[str] = []
    app = ThreeParts(log)
    await app.start()
    assert app.ready()
    await app.stop()
    assert log == ["start a", "start b", "start c", "close c", "close b", "close a"]
    assert app.readiness_at_close == [False]  # not ready before anything closes
    await app.stop()  # a second stop has nothing left to do
    assert len(log) == 6


async def test_a_failed_start_closes_what_had_started():
    log: list[str] = []
    app = ThreeParts(log, failing="c")
    with pytest.raises(OSError, match="c cannot start"):
        await app.start()
    assert log == ["start a", "start b", "close b", "close a"]
    assert not app.ready()
    await app.stop()  # nothing left open: stop after a failed start is a no-op
    assert len(log) == 4


async def test_a_failing_cleanup_does_not_skip_the_others():
    log: list[str] = []
    app = ThreeParts(log)
    await app.start()
    app.parts[1].fail_close = True
    with pytest.raises(RuntimeError, match="b cannot close"):
        await app.stop()
    assert log[3:] == ["close c", "close b", "close a"]


async def test_started_again_after_a_stop():
    log: list[str] = []
    async with ThreeParts(log) as app:
        with pytest.raises(RuntimeError, match="already started"):
            await app.start()
    await app.start()
    await app.stop()
    assert log.count("start a") == 2
    assert log.count("close a") == 2


async def test_bus_and_pool_are_unavailable_before_start():
    app = ThreeParts([])
    with pytest.raises(RuntimeError, match="three-parts is not started: no NATS"):
        _ = app.bus
    with pytest.raises(RuntimeError, match="no PostgreSQL pool"):
        _ = app.pool
