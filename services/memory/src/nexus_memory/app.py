"""Wiring and lifecycle of the memory service: start everything in order, stop it draining.

Start: the health endpoint, connect NATS, create missing streams (core owns their settings),
connect PostgreSQL (pgvector extension, vector codec, HNSW iterative scans), load the
embedder, create the tables, campaign for the lease, then the stream guard and extraction
and the `nexus-memory` endpoints. Stop (SIGTERM) unwinds that in reverse (`ServiceApp`):
endpoints first, access counts are flushed, the handlers finish what they hold, the leader's
projection commits its batch in hand and the lease is handed over, then connections close
and the health endpoint goes last.

Several replicas may run (`nexus_events.runtime.leadership`). The lease holder re-embeds by replay
if the tables hold another embedder's vectors, runs the projection and the periodic
consolidation; every replica answers search/record/list/forget (and an asked-for
consolidation, whose event ids make a repeated pass harmless), and runs the stream guard and
extraction on shared durables (each message goes to one replica).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import asyncpg
from nexus_events.events import MemoryConsolidateReply, MemoryRebuildReply
from nexus_events.runtime.leadership import Leadership
from nexus_events.runtime.metrics import MetricsSettings, setup_metrics
from nexus_events.runtime.periodic import PeriodicTask
from nexus_events.runtime.process import ServiceApp
from nexus_events.transport.bus import Bus, BusSettings
from nexus_events.transport.fast import Handlers
from nexus_events.transport.fenced_projection import FencedProjectionRunner
from nexus_events.transport.projection import (
    ProjectionRunner,
    one_replica_at_a_time,
    quote_ident,
    rebuild,
)
from opentelemetry.sdk.metrics import MeterProvider as SdkMeterProvider
from pgvector.asyncpg import register_vector

from nexus_memory.config import MemorySettings
from nexus_memory.consolidation import Consolidator, Thresholds
from nexus_memory.embedding import Embedder, make_embedder
from nexus_memory.endpoints import MemoryEndpoints
from nexus_memory.extraction import Extractor, extraction_spec
from nexus_memory.guard import SecretGuard
from nexus_memory.metrics import MemoryMetrics
from nexus_memory.projection import MEMORY_SCHEMA, MemoryProjection
from nexus_memory.search import MemorySearch, Weights
from nexus_memory.stream_guard import StreamGuard, stream_guard_spec
from nexus_memory.writer import AccessTracker, MemoryWriter

log = logging.getLogger(__name__)

SOURCE = "memory"
# Serializes the creation of the tables by replicas starting together.
_PREPARE_LOCK = "nexus_memory:prepare"


async def _init_connection(conn: asyncpg.Connection[Any]) -> None:
    await register_vector(conn)
    # A filtered HNSW scan keeps going until it has enough rows in the wanted scopes
    # (pgvector >= 0.8); without it a small scope in a big table could come back short.
    await conn.execute("SET hnsw.iterative_scan = relaxed_order")


async def connect_pool(database_url: str, size: int) -> asyncpg.Pool[Any]:
    """A pool whose connections speak pgvector; creates the extension if missing."""
    conn = await asyncpg.connect(database_url)
    try:
        await conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
    finally:
        await conn.close()
    return await asyncpg.create_pool(database_url, min_size=1, max_size=size, init=_init_connection)


async def stored_embedder(pool: asyncpg.Pool[Any], schema: str) -> str | None:
    """Name of the embedder the live tables were filled by (None: no tables yet)."""
    with contextlib.suppress(asyncpg.exceptions.UndefinedTableError):
        value = await pool.fetchval(f"SELECT name FROM {quote_ident(schema)}.embedder")
        return None if value is None else str(value)
    return None


class MemoryApp(ServiceApp):
    """The memory service. `bus` and `embedder` may be given (tests); otherwise created."""

    def __init__(
        self,
        settings: MemorySettings | None = None,
        *,
        bus_settings: BusSettings | None = None,
        bus: Bus | None = None,
        embedder: Embedder | None = None,
        metrics_settings: MetricsSettings | None = None,
        schema: str = MEMORY_SCHEMA,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.settings = settings or MemorySettings()
        self.clock = clock  # "now" of consolidation's decay (tests move it instead of sleeping)
        self.bus_settings = bus_settings
        self.metrics_settings = metrics_settings
        self.schema = schema
        super().__init__("memory", bus=bus)
        self.embedder = embedder
        self.guard = SecretGuard(self.settings.memory_secret_policy)
        self.meter_provider: SdkMeterProvider | None = None
        self.metrics = MemoryMetrics()
        self.projection: MemoryProjection | None = None
        # The leader's projection runner (None on a standby).
        self.runner: ProjectionRunner | None = None
        self.leadership: Leadership | None = None
        self.stream_guard: StreamGuard | None = None
        # The stream guard and extraction durables: FastStream subscribers
        # (nexus_events.transport.fast).
        self.handlers: Handlers | None = None
        self.extractor: Extractor | None = None
        self.tracker: AccessTracker | None = None
        self.consolidator: Consolidator | None = None
        self.endpoints: MemoryEndpoints | None = None
        self.search: MemorySearch | None = None
        self._consolidations: PeriodicTask | None = None
        self._rebuild_lock = asyncio.Lock()

    def ready(self) -> bool:
        return (
            super().ready()
            and self.leadership is not None
            and self.leadership.campaigning
            and (self.handlers is None or self.handlers.connected)
            and not (self.runner is not None and self.runner.stuck)
        )

    async def open(self, stack: contextlib.AsyncExitStack) -> None:
        s = self.settings
        await self.open_runtime(
            stack, s, bus_settings=self.bus_settings, source=SOURCE,
            create_pool=lambda: connect_pool(s.database_url, s.db_pool_size),
        )  # fmt: skip
        if self.embedder is None:
            self.embedder = await make_embedder(s)
        if self.metrics_settings is not None or MetricsSettings().prometheus_port is not None:
            self.meter_provider = setup_metrics(SOURCE, self.metrics_settings)
            stack.callback(self.meter_provider.shutdown)
            self.metrics = MemoryMetrics(self.meter_provider)
        self.projection = MemoryProjection(self.embedder, self.guard, schema=self.schema)
        await self._prepare()
        self.consolidator = Consolidator(
            self.bus,
            self.pool,
            Thresholds(s.memory_near_duplicate, s.memory_contradiction, s.memory_decay_days),
            schema=self.schema,
        )
        self.leadership = leadership = Leadership(
            self.bus.js,
            service=SOURCE,
            bucket=s.memory_lease_bucket,
            ttl=s.lease_ttl_seconds,
            lead=self._lead,
            step_down=self._step_down,
        )
        await leadership.open(stack)  # stops after all below
        # Its own connection; in-flight handlers get half the drain timeout to finish.
        self.handlers = handlers = Handlers(self.bus, graceful_timeout=s.drain_timeout / 2)
        self.stream_guard = StreamGuard(self.bus, self.guard, self.metrics)
        handlers.durable(stream_guard_spec(f"{s.consumer_prefix}_stream_guard", s.fetch_timeout))(
            self.stream_guard.on_recorded
        )
        writer = MemoryWriter(self.bus, self.pool, self.guard, self.metrics, schema=self.schema)
        if s.memory_extraction:
            self.extractor = Extractor(
                self.bus, self.pool, writer, self.metrics,
                default_base_url=s.llm_base_url, api_key=s.llm_api_key, timeout=s.llm_timeout,
                limit=s.memory_extraction_max, schema=self.schema,
            )  # fmt: skip
            stack.push_async_callback(self.extractor.close)
            handlers.durable(
                extraction_spec(
                    f"{s.consumer_prefix}_extraction", s.memory_extraction_events, s.fetch_timeout
                )
            )(self.extractor.on_ending)
        await handlers.start()
        stack.push_async_callback(handlers.stop)
        self.tracker = AccessTracker(self.bus, s.memory_access_flush)
        await self.tracker.start()
        stack.push_async_callback(self.tracker.stop)
        self.search = search = MemorySearch(
            self.pool,
            self.embedder,
            Weights(
                rrf_k=s.memory_rrf_k, half_life_days=s.memory_half_life_days,
                kinds=s.memory_kind_weights,
            ),
            candidates=s.memory_candidates,
            schema=self.schema,
        )  # fmt: skip
        self.endpoints = MemoryEndpoints(
            self.bus, self.pool, search=search, writer=writer, tracker=self.tracker,
            metrics=self.metrics, consolidate=self.consolidate, rebuild=self.rebuild,
            schema=self.schema,
        )  # fmt: skip
        await self.endpoints.start()
        stack.push_async_callback(self.endpoints.stop)
        log.info("memory embedder: %s", self.embedder.name)

    def _runner(self) -> FencedProjectionRunner:
        assert self.projection is not None
        s = self.settings
        return FencedProjectionRunner(
            self.bus, self.pool, self.projection, fence=self._fence,
            batch=s.projection_batch, fetch_timeout=s.fetch_timeout,
        )  # fmt: skip

    async def _fence(self) -> bool:
        return self.leadership is not None and await self.leadership.fence()

    async def _prepare(self) -> None:
        """Create the tables (if missing) on every replica, so a standby answers before any
        leader has run; one replica at a time (concurrent CREATE ... IF NOT EXISTS can
        still collide). An existing table keeps its embedder: the leader re-embeds."""
        async with one_replica_at_a_time(self.pool, _PREPARE_LOCK):
            await self._runner().setup()

    async def _lead(self) -> None:
        """Taking the lease: re-embed if another embedder filled the tables, resume the
        projection from its checkpoint, consolidate on the interval."""
        assert self.embedder is not None
        held = await stored_embedder(self.pool, self.schema)
        if held is not None and held != self.embedder.name:
            log.warning(
                "memory tables hold %s vectors, configured embedder is %s: re-embedding by replay",
                held,
                self.embedder.name,
            )
            async with self._rebuild_lock:
                await self._replay_all()
        self.runner = runner = self._runner()
        await runner.start()
        interval = self.settings.memory_consolidation_interval
        if interval > 0:
            # A pass in hand is cut on a step-down (the lease is another replica's).
            self._consolidations = PeriodicTask(
                self.consolidate,
                interval,
                name="memory consolidation pass",
                first="after_interval",
                stop_grace=0,
                logger=log,
            )
            self._consolidations.start()

    async def _step_down(self) -> None:
        """Losing or handing over the lease: no more periodic passes; the projection commits
        its batch in hand (refused by the fence if the lease is gone) and stops."""
        consolidations, self._consolidations = self._consolidations, None
        if consolidations is not None:
            await consolidations.stop()
        runner, self.runner = self.runner, None
        if runner is not None:
            await runner.stop()

    async def consolidate(self, scopes: list[str] | None = None) -> MemoryConsolidateReply:
        """One consolidation pass now (over `scopes`, else all)."""
        assert self.consolidator is not None
        return await self.consolidator.run(scopes or [], self.clock())

    async def _replay_all(self) -> int:
        assert self.projection is not None
        return await rebuild(
            self.bus, self.pool, self.projection, batch=self.settings.projection_batch
        )

    async def rebuild(self) -> MemoryRebuildReply:
        """Replay NEXUS_MEMORY into fresh tables (the configured embedder) and swap them in."""
        assert self.embedder is not None
        async with self._rebuild_lock:
            started = time.perf_counter()
            applied = await self._replay_all()
        return MemoryRebuildReply(
            applied=applied,
            seconds=round(time.perf_counter() - started, 3),
            embedder=self.embedder.name,
            dimension=self.embedder.dimension,
        )
