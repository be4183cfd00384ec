"""Wiring and lifecycle of the core service: start everything in order, stop it draining.

Start: connect NATS and PostgreSQL, ensure streams, apply migrations, start the catalog,
agent_runs and board projections, the run assembly consumer, the poison sweepers of
NEXUS_INBOX and NEXUS_CHANNELS, the queries and the health endpoint. Stop (SIGTERM): stop
taking work first (health not ready, queries, assembly consumer finishes its batch, the
sweepers theirs), then the projections commit their batch in hand, then close.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import asyncpg
from motor.motor_asyncio import AsyncIOMotorClient, AsyncIOMotorDatabase
from nexus_events.bus import Bus, BusSettings, Consumer
from nexus_events.health import HealthServer
from nexus_events.metrics import setup_metrics
from nexus_events.process import ServiceApp
from nexus_events.projection import ProjectionRunner
from nexus_events.streams import CATALOG, ensure_streams
from opentelemetry.sdk.metrics import MeterProvider as SdkMeterProvider

from nexus_core.board_projection import BoardProjection
from nexus_core.catalog_store import CatalogProjection, CatalogStore, PgCatalogStore
from nexus_core.config import CoreSettings
from nexus_core.errors import CatalogBackendError
from nexus_core.handlers import AssemblyHandler, assembly_consumer_spec
from nexus_core.memory import MemoryClient
from nexus_core.mongo_catalog import (
    Document,
    MongoCatalogRunner,
    MongoCatalogStore,
    default_database,
    is_mongodb_url,
)
from nexus_core.mongo_catalog import (
    connect as connect_mongo,
)
from nexus_core.poison_sweeper import accept, sweeper_specs
from nexus_core.queries import CoreQueries
from nexus_core.requests_store import RunRequestStore
from nexus_core.run_metrics import RunMetrics, RunMetricsSettings
from nexus_core.runs_projection import AgentRunsProjection

log = logging.getLogger(__name__)

SOURCE = "core"


class CoreApp(ServiceApp):
    """The core service. `bus`/`pool` may be given (tests); otherwise they are created.

    The catalog lives in PostgreSQL (schema core) unless `settings.catalog_url` is a
    ``mongodb://`` URL; then in that MongoDB (motor), or in `catalog_db` when given (tests).
    """

    def __init__(
        self,
        settings: CoreSettings | None = None,
        *,
        bus_settings: BusSettings | None = None,
        bus: Bus | None = None,
        pool: asyncpg.Pool[Any] | None = None,
        catalog_db: AsyncIOMotorDatabase[Document] | None = None,
        metrics_settings: RunMetricsSettings | None = None,
    ) -> None:
        self.settings = settings or CoreSettings()
        # Core hosts the system's metrics (one process must: they follow one durable consumer).
        self.metrics_settings = metrics_settings or RunMetricsSettings()
        self.metrics: RunMetrics | None = None
        self.meter_provider: SdkMeterProvider | None = None
        self.bus_settings = bus_settings
        super().__init__("core", bus=bus, pool=pool)
        self._catalog_db = catalog_db
        self._mongo: AsyncIOMotorClient[Document] | None = None
        self.catalog: CatalogStore | None = None
        self.catalog_runner: ProjectionRunner | MongoCatalogRunner | None = None
        # agent_runs and board follow NEXUS_RUNS together: one reader, one transaction.
        self.views_runner: ProjectionRunner | None = None
        self.assembly: Consumer | None = None
        # Durable readers of NEXUS_INBOX and NEXUS_CHANNELS that dead-letter their poison.
        self.sweepers: list[Consumer] = []
        self.queries: CoreQueries | None = None
        self.health: HealthServer | None = None
        self._running = False

    def ready(self) -> bool:
        """Connected, running, and no projection stuck (failing over and over without
        applying anything): a core whose views stopped moving must not look healthy."""
        return (
            self._running
            and self._bus is not None
            and self._bus.nc.is_connected
            and not any(r.stuck for r in self.followers())
        )

    def followers(self) -> list[ProjectionRunner | MongoCatalogRunner]:
        """The stream followers behind core's views (for readiness and metrics)."""
        return [r for r in (self.catalog_runner, self.views_runner) if r is not None]

    async def start(self) -> None:
        s = self.settings
        mongo = is_mongodb_url(s.catalog_url) or self._catalog_db is not None
        if s.catalog_url is not None and not mongo and not s.catalog_url.startswith("postgres"):
            raise CatalogBackendError(
                f"catalog backend {s.catalog_url.split(':', 1)[0]!r} is not supported; use a "
                "mongodb:// URL, or leave NEXUS_CATALOG_URL unset to use PostgreSQL"
            )
        if self._bus is None:
            self._bus = await Bus.connect(self.bus_settings, source=SOURCE)
        if self._pool is None:
            self._pool = await asyncpg.create_pool(
                s.database_url, min_size=1, max_size=s.db_pool_size
            )
        # Core owns the stream settings (NEXUS_STREAMS_*); other services only create.
        await ensure_streams(self.bus.js)
        requests = RunRequestStore(self.pool)
        await requests.migrate()
        batch = s.projection_batch
        bus, pool = self.bus, self.pool
        catalog: CatalogStore
        if mongo:
            db = self._catalog_db
            if db is None:
                assert s.catalog_url is not None
                self._mongo = connect_mongo(s.catalog_url)
                db = default_database(self._mongo)
            store = MongoCatalogStore(db)
            catalog = store
            self.catalog_runner = MongoCatalogRunner(
                bus,
                store,
                batch=batch,
                fetch_timeout=s.fetch_timeout,
                consumer=f"{s.consumer_prefix}_catalog_mongo",
            )
        else:
            catalog = PgCatalogStore(pool)
            self.catalog_runner = ProjectionRunner(
                bus, pool, CatalogProjection(), batch=batch, fetch_timeout=s.fetch_timeout
            )
        self.catalog = catalog
        self.views_runner = ProjectionRunner(
            bus,
            pool,
            [AgentRunsProjection(), BoardProjection()],
            batch=batch,
            fetch_timeout=s.fetch_timeout,
        )
        for runner in (self.catalog_runner, self.views_runner):
            await runner.start()
        handler = AssemblyHandler(
            bus=self.bus,
            catalog=catalog,
            requests=requests,
            memory=MemoryClient(self.bus.nc, timeout=s.memory_timeout, enabled=s.memory_enabled),
            catalog_caught_up=self.catalog_caught_up,
            concurrency=s.assembly_concurrency,
        )
        self.assembly = self.bus.consumer(
            assembly_consumer_spec(f"{s.consumer_prefix}_assembly", s.fetch_timeout), handler
        )
        await self.assembly.start()
        for spec in sweeper_specs(s.consumer_prefix, s.fetch_timeout):
            self.sweepers.append(self.bus.consumer(spec, accept))
            await self.sweepers[-1].start()
        self.queries = CoreQueries(self.bus, self.pool, catalog)
        await self.queries.start()
        if self.metrics_settings.enabled:
            self.meter_provider = setup_metrics("core", self.metrics_settings)
            self.metrics = RunMetrics(
                self.bus,
                self.meter_provider,
                pool=self.pool,
                settings=self.metrics_settings,
                followers=self.followers(),
            )
            await self.metrics.start()
        if s.health_port is not None:
            self.health = HealthServer(self.ready, s.health_host, s.health_port)
            await self.health.start()
        self._running = True
        log.info("core started")

    async def catalog_fresh(self) -> bool:
        """Whether the catalog projection has applied everything in NEXUS_CATALOG."""
        return await self.catalog_caught_up(0)

    async def catalog_caught_up(self, within: float) -> bool:
        """Wait up to `within` seconds until the catalog projection has applied everything
        NEXUS_CATALOG holds now; return whether it has."""
        if self.catalog_runner is None:
            return False
        last = (await self.bus.js.stream_info(CATALOG)).state.last_seq
        if self.catalog_runner.last_seq.get(CATALOG, 0) >= last:
            return True
        if within <= 0:
            return False
        try:
            await self.catalog_runner.wait_until(CATALOG, last, within=within)
        except TimeoutError:
            return False
        return True

    async def stop(self) -> None:
        """Drain: stop taking requests, finish batches in hand, then close connections."""
        self._running = False
        if self.queries is not None:
            await self.queries.stop()
        if self.assembly is not None:
            await self.assembly.stop()
        for sweeper in self.sweepers:
            await sweeper.stop()
        self.sweepers.clear()
        if self.metrics is not None:
            await self.metrics.stop()
            self.metrics = None
        if self.meter_provider is not None:
            self.meter_provider.shutdown()
            self.meter_provider = None
        runners = (self.views_runner, self.catalog_runner)
        await asyncio.gather(*(r.stop() for r in runners if r is not None))
        if self.health is not None:
            await self.health.stop()
        if self._mongo is not None:
            self._mongo.close()
            self._mongo = None
        await self.close_connections()
        log.info("core stopped")
