"""Process-wide concerns of long-running Nexus services: one way to run one (`run_service`)
and garbage-collector tuning."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import signal
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Protocol, Self

from nexus_events.logs import setup_logging
from nexus_events.telemetry import setup_telemetry, shutdown_telemetry

if TYPE_CHECKING:
    import asyncpg

    from nexus_events.bus import Bus

# What a service's __main__ hands `run_service`: run until the event is set, then drain.
Serve = Callable[[asyncio.Event], Awaitable[None]]

# Net allocations of tracked objects between young-generation collections, at the least;
# Python's default is 700.
DEFAULT_GC_THRESHOLD = 50_000
# Tracked objects a projection keeps alive per event it has in flight, with room to spare:
# the young generation held 58k objects while a 5,000-event batch was in hand during the core
# replay (message, headers, decoded event and its model internals, envelope, subject, fold
# fact: about 12 per event), and up to three batches are alive at once (streaming in, being
# decoded, being applied).
GC_OBJECTS_PER_BATCH_EVENT = 40


def gc_threshold_for_batch(batch: int) -> int:
    """A young-generation threshold above what `batch`-event projection batches keep alive.

    Below that, every batch set off collections that walked the whole batch in flight, only to
    find it all still alive: with threshold 50,000 and 5,000-event batches, 37 young
    collections of ~40 ms each took 16 % of the core replay.
    """
    return max(DEFAULT_GC_THRESHOLD, GC_OBJECTS_PER_BATCH_EVENT * batch)


def tune_gc(threshold: int = DEFAULT_GC_THRESHOLD) -> None:
    """Freeze what startup allocated and make cyclic garbage collection rarer.

    A projection replay allocates millions of short-lived objects (messages, events, rows)
    that reference counting frees; with Python's defaults the collector still ran thousands
    of young and dozens of full collections, each full one walking every live object, and
    took a quarter of the core replay's time. Frozen startup objects (modules, classes,
    settings) are never walked again. Call once, after startup; `threshold` 0 leaves
    Python's defaults alone.
    """
    if threshold <= 0:
        return
    gc.collect()
    gc.freeze()
    _, older, oldest = gc.get_threshold()
    gc.set_threshold(threshold, older, oldest)


__all__ = [
    "DEFAULT_GC_THRESHOLD",
    "GC_OBJECTS_PER_BATCH_EVENT",
    "gc_threshold_for_batch",
    "tune_gc",
]


class Lifecycle(Protocol):
    """A service app: `start` brings it up; `stop` drains it and closes what it opened."""

    async def start(self) -> None: ...

    async def stop(self) -> None: ...


class ServiceApp(ABC):
    """Base of a service's app: `start` and `stop` (which drains), `async with` over them, and
    the NATS connection and PostgreSQL pool it uses: handed in (a test's, shared; never
    closed here) or opened by `start` (closed by `close_connections` at the end of `stop`)."""

    def __init__(
        self, name: str, *, bus: Bus | None = None, pool: asyncpg.Pool[Any] | None = None
    ) -> None:
        self.name = name
        self._bus = bus
        self._own_bus = bus is None
        self._pool = pool
        self._own_pool = pool is None

    @property
    def bus(self) -> Bus:
        if self._bus is None:
            raise RuntimeError(f"{self.name} is not started: no NATS connection")
        return self._bus

    @property
    def pool(self) -> asyncpg.Pool[Any]:
        if self._pool is None:
            raise RuntimeError(f"{self.name} is not started: no PostgreSQL pool")
        return self._pool

    @abstractmethod
    async def start(self) -> None: ...

    @abstractmethod
    async def stop(self) -> None: ...

    async def close_connections(self) -> None:
        """The end of every `stop`: close the pool, then the bus, each only if it is ours."""
        if self._own_pool and self._pool is not None:
            await close_pool(self._pool)
            self._pool = None
        if self._own_bus and self._bus is not None:
            await self._bus.close()
            self._bus = None

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()


# Seconds a service waits for its PostgreSQL pool to close on stop: past it, connections still
# held by a stuck query are abandoned rather than holding the process.
POOL_CLOSE_TIMEOUT = 10.0


async def close_pool(pool: Any) -> None:
    """Close an asyncpg pool within `POOL_CLOSE_TIMEOUT` seconds (then give up on it)."""
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(pool.close(), timeout=POOL_CLOSE_TIMEOUT)


async def serve_until(app: Lifecycle, stop: asyncio.Event, drain_timeout: float) -> None:
    """Start `app`, wait for `stop`, then drain it within `drain_timeout` seconds (a drain
    that overruns raises TimeoutError rather than holding the process)."""
    await app.start()
    try:
        await stop.wait()
    finally:
        await asyncio.wait_for(app.stop(), timeout=drain_timeout)


def run_service(name: str, serve: Serve) -> None:
    """Run one service process the way every Nexus service runs: JSON logs (`setup_logging`),
    telemetry (`setup_telemetry`, shut down at exit so buffered spans are exported), SIGTERM
    and SIGINT set the stop event that `serve` waits on, and `serve` drains before returning.

    Settings are read by the caller before this (a bad setting fails before anything starts).
    """
    setup_logging(name)
    setup_telemetry(name)

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await serve(stop)

    try:
        asyncio.run(main())
    finally:
        shutdown_telemetry()
