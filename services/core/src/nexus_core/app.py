"""Wiring and lifecycle of the core service: start everything in order, stop it draining.

Start: the health endpoint, connect NATS and PostgreSQL, ensure streams, apply migrations,
start the catalog, agent_runs and board projections, the run assembly consumer, the poison
sweepers of NEXUS_INBOX and NEXUS_CHANNELS, the queries and the metrics. Stop (SIGTERM)
unwinds that in reverse (`ServiceApp`): not ready at once, metrics, queries, the sweepers and
the assembly consumer finish their batch, then the projections commit their batch in hand,
connections close, and the health endpoint goes last.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

import asyncpg
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
    ``mongodb://`` URL; then in that MongoDB (motor).
    """

    def __init__(
        self,
        settings: CoreSettings | None = None,
        *,
        bus_settings: BusSettings | None = None,
        bus: Bus | None = None,
        pool: asyncpg.Pool[Any] | None = None,
        metrics_settings: RunMetricsSettings | None = None,
    ) -> None:
        self.settings = settings or CoreSettings()
        # Core hosts the system's metrics (one process must: they follow one durable consumer).
        self.metrics_settings = metrics_settings or RunMetricsSettings()
        self.metrics: RunMetrics | None = None
        self.meter_provider: SdkMeterProvider | None = None
        self.bus_settings = bus_settings
        super().__init__("core", bus=bus, pool=pool)
        self.catalog: CatalogStore | None = None
        self.catalog_runner: ProjectionRunner | MongoCatalogRunner | None = None
        # agent_runs and board follow NEXUS_RUNS together: one reader, one transaction.
        self.views_runner: ProjectionRunner | None = None
        self.assembly: Consumer | None = None
        # Durable readers of NEXUS_INBOX and NEXUS_CHANNELS that dead-letter their poison.
        self.sweepers: list[Consumer] = []
        self.queries: CoreQueries | None = None
        self.health: HealthServer | None = None

    def ready(self) -> bool:
        """Connected, running, and no projection stuck (failing over and over without
        applying anything): a core whose views stopped moving must not look healthy."""
        return self._running and self.nats_connected and not any(r.stuck for r in self.followers())

    def followers(self) -> list[ProjectionRunner | MongoCatalogRunner]:
        """The stream followers behind core's views (for readiness and metrics)."""
        return [r for r in (self.catalog_runner, self.views_runner) if r is not None]

    async def open(self, stack: contextlib.AsyncExitStack) -> None:
        s = self.settings
        mongo = is_mongodb_url(s.catalog_url)
        if s.catalog_url is not None and not mongo and not s.catalog_url.startswith("postgres"):
            raise CatalogBackendError(
                f"catalog backend {s.catalog_url.split(':', 1)[0]!r} is not supported; use a "
                "mongodb:// URL, or leave NEXUS_CATALOG_URL unset to use PostgreSQL"
            )
        # First up, last down: live (and not ready) through start-up and the whole drain.
        if s.health_port is not None:
            self.health = HealthServer(self.ready, s.health_host, s.health_port)
            await self.health.start()
            stack.push_async_callback(self.health.stop)
        bus = await self.connect_bus(stack, self.bus_settings, SOURCE)
        pool = await self.open_pool(
            stack,
            lambda: asyncpg.create_pool(s.database_url, min_size=1, max_size=s.db_pool_size),
        )
        # Core owns the stream settings (NEXUS_STREAMS_*); other services only create.
        await ensure_streams(bus.js)
        requests = RunRequestStore(pool)
        await requests.migrate()
        batch = s.projection_batch
        catalog: CatalogStore
        if mongo:
            assert s.catalog_url is not None
            client = connect_mongo(s.catalog_url)
            stack.callback(client.close)
            store = MongoCatalogStore(default_database(client))
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
        # Those started stop together (each commits its batch in hand), after all below.
        started: list[ProjectionRunner | MongoCatalogRunner] = []
        stack.push_async_callback(_stop_all, started)
        for runner in (self.catalog_runner, self.views_runner):
            await runner.start()
            started.append(runner)
        handler = AssemblyHandler(
            bus=bus,
            catalog=catalog,
            requests=requests,
            memory=MemoryClient(bus.nc, timeout=s.memory_timeout, enabled=s.memory_enabled),
            catalog_caught_up=self.catalog_caught_up,
            concurrency=s.assembly_concurrency,
        )
        self.assembly = bus.consumer(
            assembly_consumer_spec(f"{s.consumer_prefix}_assembly", s.fetch_timeout), handler
        )
        await self.assembly.start()
        stack.push_async_callback(self.assembly.stop)
        await self._start_sweepers(stack, bus)
        self.queries = CoreQueries(bus, pool, catalog)
        await self.queries.start()
        stack.push_async_callback(self.queries.stop)
        if self.metrics_settings.enabled:
            self.meter_provider = provider = setup_metrics("core", self.metrics_settings)
            stack.callback(provider.shutdown)
            self.metrics = RunMetrics(
                bus, provider, pool=pool, settings=self.metrics_settings,
                followers=self.followers(),
            )  # fmt: skip
            await self.metrics.start()
            stack.push_async_callback(self._stop_metrics)

    async def _start_sweepers(self, stack: contextlib.AsyncExitStack, bus: Bus) -> None:
        """The durable readers that dead-letter poison on NEXUS_INBOX and NEXUS_CHANNELS."""
        s = self.settings
        for spec in sweeper_specs(s.consumer_prefix, s.fetch_timeout):
            sweeper = bus.consumer(spec, accept)
            await sweeper.start()
            stack.push_async_callback(sweeper.stop)
            self.sweepers.append(sweeper)

    async def _stop_metrics(self) -> None:
        metrics, self.metrics = self.metrics, None  # released with core
        if metrics is not None:
            await metrics.stop()

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


async def _stop_all(runners: list[ProjectionRunner | MongoCatalogRunner]) -> None:
    await asyncio.gather(*(r.stop() for r in runners))
