"""Process-wide concerns of long-running Nexus services: one way to run one (`run_service`:
settings, logs, telemetry, signals, drain), one app skeleton (`ServiceApp`: start and stop
over an exit stack, the start-up every service shares) and garbage-collector tuning."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import signal
import sys
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol, Self, TypeVar

from pydantic import ValidationError

from nexus_events.runtime.logs import setup_logging
from nexus_events.runtime.telemetry import setup_telemetry, shutdown_telemetry

if TYPE_CHECKING:
    import asyncpg

    from nexus_events.runtime.health import HealthServer, JetStreamProbe
    from nexus_events.transport.bus import Bus
    from nexus_events.transport.connect import BusSettings

log = logging.getLogger(__name__)

# A service's settings (a pydantic-settings class, loaded by `run_service`).
S = TypeVar("S")

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


class Lifecycle(Protocol):
    """A service app: `start` brings it up; `stop` drains it and closes what it opened."""

    async def start(self) -> None: ...

    async def stop(self) -> None: ...


class HealthSettings(Protocol):
    """Where a service's health endpoint listens (`ServiceSettings` and the scheduler's)."""

    @property
    def health_host(self) -> str: ...

    @property
    def health_port(self) -> int | None: ...


class ServiceApp(ABC):
    """Base of a service's app: `start` and `stop` (which drains), `async with` over them, and
    the NATS connection and PostgreSQL pool it uses: handed in (a test's, shared; never
    closed here) or opened by `start`.

    A subclass writes `open(stack)`: it starts its resources in order and registers each
    one's cleanup on `stack` as soon as that resource is up (``stack.push_async_callback``).
    `stop` unwinds the stack in reverse order, so what started last stops first (start the
    health endpoint first and it answers until the very end of a drain); a start that fails
    part-way closes what had started, in the same reverse order, before the error propagates.
    A cleanup that raises does not keep the others from running (the error is raised after).

    `open` begins with `open_runtime`, the start-up every service shares, then starts what is
    its own; `ready` is what the health endpoint's /readyz answers (a service adds its own
    conditions to the base's).
    """

    def __init__(
        self, name: str, *, bus: Bus | None = None, pool: asyncpg.Pool[Any] | None = None
    ) -> None:
        self.name = name
        self._bus = bus
        self._pool = pool
        self._stack: contextlib.AsyncExitStack | None = None
        # Set once `open` finished, cleared first thing in `stop`: readiness starts here.
        self._running = False
        # Set by `open_runtime`: the health endpoint (None while its port is off) and the
        # JetStream probe (None unless the service watches streams).
        self.health: HealthServer | None = None
        self.jetstream: JetStreamProbe | None = None

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

    @property
    def nats_connected(self) -> bool:
        """Whether the service's NATS connection is up now (False before start)."""
        return self._bus is not None and self._bus.nc.is_connected

    def ready(self) -> bool:
        """Started, not stopping, and connected to NATS; with a JetStream probe, JetStream
        can also store in the service's streams."""
        return (
            self._running and self.nats_connected and (self.jetstream is None or self.jetstream.ok)
        )

    @abstractmethod
    async def open(self, stack: contextlib.AsyncExitStack) -> None:
        """Start the service's resources in order, each registering its cleanup on `stack`."""

    async def open_runtime(
        self,
        stack: contextlib.AsyncExitStack,
        health: HealthSettings,
        *,
        bus_settings: BusSettings | None,
        source: str,
        update_streams: bool = False,
        probe_streams: Sequence[str] = (),
        probe_interval: float = 2.0,
        create_pool: Callable[[], Awaitable[asyncpg.Pool[Any]]] | None = None,
        connected: Callable[[Bus, contextlib.AsyncExitStack], Awaitable[None]] | None = None,
    ) -> Bus:
        """The start-up every service shares, in order, each part closed when `stack` unwinds.

        1. The health endpoint (unless `health.health_port` is off), first so it answers
           through the whole start-up and drain: live, and not ready until `open` is done.
        2. The NATS connection (`connect_bus`) as `source`; then `connected`, for what must
           answer on NATS before anything waits on JetStream (the scheduler's auth callout:
           runners connect through it).
        3. Every Nexus stream that is missing is created; with `update_streams` (core, the
           owner of the stream settings) existing ones are brought to the settings too.
        4. With `probe_streams`, a `JetStreamProbe` over them every `probe_interval` seconds:
           `ready` is False while JetStream cannot store in one of them (an election).
        5. With `create_pool`, the PostgreSQL pool (`open_pool`); the service migrates its
           tables after this returns.
        """
        from nexus_events.contract.streams import ensure_streams

        if health.health_port is not None:
            from nexus_events.runtime.health import HealthServer

            self.health = HealthServer(self.ready, health.health_host, health.health_port)
            await self.health.start()
            stack.push_async_callback(self.health.stop)
        bus = await self.connect_bus(stack, bus_settings, source)
        if connected is not None:
            await connected(bus, stack)
        await ensure_streams(bus.js, update=update_streams)
        if probe_streams:
            from nexus_events.runtime.health import JetStreamProbe

            self.jetstream = JetStreamProbe(bus.js, probe_streams, interval=probe_interval)
            await self.jetstream.start()
            stack.push_async_callback(self.jetstream.stop)
        if create_pool is not None:
            await self.open_pool(stack, create_pool)
        return bus

    async def start(self) -> None:
        """Run `open`; if it raises, close what it had started (reverse order) and re-raise."""
        if self._stack is not None:
            raise RuntimeError(f"{self.name} is already started")
        stack = contextlib.AsyncExitStack()
        self._stack = stack
        try:
            await self.open(stack)
        except BaseException:
            self._stack = None
            await stack.aclose()
            raise
        self._running = True
        log.info("%s started", self.name)

    async def stop(self) -> None:
        """Drain: not ready at once, then every cleanup in reverse order of start."""
        self._running = False
        stack, self._stack = self._stack, None
        if stack is None:
            return
        await stack.aclose()
        log.info("%s stopped", self.name)

    async def connect_bus(
        self, stack: contextlib.AsyncExitStack, settings: BusSettings | None, source: str
    ) -> Bus:
        """The bus handed in, else a new connection closed when `stack` unwinds."""
        if self._bus is None:
            from nexus_events.transport.bus import Bus

            self._bus = await Bus.connect(settings, source=source)
            stack.push_async_callback(self._close_bus)
        return self._bus

    async def open_pool(
        self,
        stack: contextlib.AsyncExitStack,
        create: Callable[[], Awaitable[asyncpg.Pool[Any]]],
    ) -> asyncpg.Pool[Any]:
        """The pool handed in, else one made by `create`, closed when `stack` unwinds."""
        if self._pool is None:
            self._pool = await create()
            stack.push_async_callback(self._close_pool)
        return self._pool

    async def _close_bus(self) -> None:
        bus, self._bus = self._bus, None
        if bus is not None:
            await bus.close()

    async def _close_pool(self) -> None:
        pool, self._pool = self._pool, None
        if pool is not None:
            await close_pool(pool)

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


async def serve_until(app: Lifecycle, stop: asyncio.Event, drain_timeout: float | None) -> None:
    """Start `app`, wait for `stop`, then drain it within `drain_timeout` seconds (a drain
    that overruns raises TimeoutError rather than holding the process; None: unbounded)."""
    await app.start()
    try:
        await stop.wait()
    finally:
        await asyncio.wait_for(app.stop(), timeout=drain_timeout)


# A service's exit status when its settings are invalid (as the CLI's for invalid input).
EXIT_BAD_SETTINGS = 2


def settings_error(exc: ValidationError, prefix: str = "NEXUS_") -> str:
    """One line naming the first bad variable (``NEXUS_CHANNEL_APPROVERS: ...``)."""
    first = exc.errors(include_url=False, include_input=False)[0]
    name = prefix + str(first["loc"][0]).upper() if first["loc"] else "settings"
    return f"{name}: {first['msg'].removeprefix('Value error, ')}"


def load_settings(name: str, load: Callable[[], S]) -> S:
    """`load()` the process's settings; invalid ones end the process with one line on stderr
    naming the variable and exit status `EXIT_BAD_SETTINGS` (a person fixes the variable; a
    traceback would only hide it)."""
    try:
        return load()
    except ValidationError as exc:
        print(f"{name}: invalid settings: {settings_error(exc)}", file=sys.stderr)
        raise SystemExit(EXIT_BAD_SETTINGS) from None


def run_service(
    name: str,
    load: Callable[[], S],
    make_app: Callable[[S], Lifecycle],
    *,
    drain_timeout: Callable[[S], float | None] = lambda _: None,
    gc_threshold: Callable[[S], int] = lambda _: DEFAULT_GC_THRESHOLD,
) -> None:
    """Run one service process the way every Nexus service runs.

    Settings first (`load`, e.g. the settings class): invalid ones end the process with one
    line on stderr naming the variable and exit status `EXIT_BAD_SETTINGS`, before anything
    starts. Then the collector is tuned (`tune_gc` with `gc_threshold(settings)`), JSON logs
    (`setup_logging`) and telemetry (`setup_telemetry`, shut down at exit so buffered spans
    are exported) are set up, and the app `make_app(settings)` is started; SIGTERM and SIGINT
    stop it, draining within `drain_timeout(settings)` seconds (None: the app bounds its own
    drain).
    """
    settings = load_settings(name, load)
    setup_logging(name)
    setup_telemetry(name)
    tune_gc(gc_threshold(settings))

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await serve_until(make_app(settings), stop, drain_timeout(settings))

    try:
        asyncio.run(main())
    finally:
        shutdown_telemetry()


__all__ = [
    "DEFAULT_GC_THRESHOLD",
    "EXIT_BAD_SETTINGS",
    "GC_OBJECTS_PER_BATCH_EVENT",
    "HealthSettings",
    "Lifecycle",
    "ServiceApp",
    "close_pool",
    "gc_threshold_for_batch",
    "run_service",
    "serve_until",
    "settings_error",
    "tune_gc",
]
