"""Wiring and lifecycle of the core service: start everything in order, stop it draining.

Start: the health endpoint, connect NATS and PostgreSQL, ensure streams, apply migrations,
create the projections' tables, campaign for the lease, then the run assembly consumer, the
poison sweepers of NEXUS_INBOX and NEXUS_CHANNELS and the queries. Stop (SIGTERM) unwinds
that in reverse (`ServiceApp`): not ready at once, queries, the sweepers and the assembly
consumer finish their batch, then the leader's projections commit their batch in hand and
the lease is handed over, connections close, and the health endpoint goes last.

Several replicas may run (`nexus_events.runtime.leadership`). Only the lease holder runs what one
replica may run: the catalog, agent_runs and board projections (each follows its stream
through one consumer it recreates from its checkpoint) and the run metrics (counted from
one durable consumer, see `nexus_core.run_metrics`). Every replica answers queries, and
assembles runs and sweeps poison on shared durables: those deliver each message to one
replica, and assembly is idempotent (a claim ledger, deterministic event ids).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from typing import Any

import asyncpg
from nexus_events.contract.streams import CATALOG
from nexus_events.runtime.leadership import Leadership
from nexus_events.runtime.metrics import setup_metrics
from nexus_events.runtime.process import ServiceApp
from nexus_events.transport.bus import Bus, BusSettings, Consumer
from nexus_events.transport.fenced_projection import FencedProjectionRunner
from nexus_events.transport.projection import (
    ProjectionRunner,
    one_replica_at_a_time,
    read_checkpoint,
)
from opentelemetry.sdk.metrics import MeterProvider as SdkMeterProvider

from nexus_core.board_projection import BoardProjection, task_team
from nexus_core.canary_runner import CanaryRunner
from nexus_core.catalog_store import (
    CATALOG_SCHEMA,
    CatalogProjection,
    CatalogStore,
    PgCatalogStore,
)
from nexus_core.config import CoreSettings
from nexus_core.errors import CatalogBackendError
from nexus_core.handlers import AssemblyHandler, assembly_consumer_spec
from nexus_core.lab_sources import LabSourceReader
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
# How often a standby looks at the catalog checkpoint the leader stores while a run waits for
# a definition (the leader itself is woken by its runner instead).
CATALOG_POLL_SECONDS = 0.05
# Serializes the creation of the projections' tables by replicas starting together.
_PREPARE_LOCK = "nexus_core:prepare"


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
        self._mongo_store: MongoCatalogStore | None = None
        # The leader's projections (None on a standby): the catalog's, and agent_runs and
        # board, which follow NEXUS_RUNS together (one reader, one transaction).
        self.catalog_runner: ProjectionRunner | MongoCatalogRunner | None = None
        self.views_runner: ProjectionRunner | None = None
        self.leadership: Leadership | None = None
        self.assembly: Consumer | None = None
        # Durable readers of NEXUS_INBOX and NEXUS_CHANNELS that dead-letter their poison.
        self.sweepers: list[Consumer] = []
        self.queries: CoreQueries | None = None
        # The leader's canary decider (started and stopped with the lease).
        self.canary: CanaryRunner | None = None

    def ready(self) -> bool:
        """Connected, running, campaigning for the lease (leading or standing by), and no
        projection stuck (failing over and over without applying anything): a core whose
        views stopped moving must not look healthy."""
        return (
            super().ready()
            and self.leadership is not None
            and self.leadership.campaigning
            and not any(r.stuck for r in self.followers())
        )

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
        # Core owns the stream settings (NEXUS_STREAMS_*): it updates them, others only create.
        bus = await self.open_runtime(
            stack, s, bus_settings=self.bus_settings, source=SOURCE, update_streams=True,
            create_pool=s.create_pool,
        )  # fmt: skip
        pool = self.pool
        requests = RunRequestStore(pool)
        await requests.migrate()
        if mongo:
            assert s.catalog_url is not None
            client = connect_mongo(s.catalog_url)
            stack.callback(client.close)
            self._mongo_store = MongoCatalogStore(default_database(client))
            self.catalog = self._mongo_store
        else:
            self.catalog = PgCatalogStore(pool)
        await self._prepare(pool)
        if self.metrics_settings.enabled:
            self.meter_provider = provider = setup_metrics("core", self.metrics_settings)
            stack.callback(provider.shutdown)
            self.metrics = RunMetrics(bus, provider, pool=pool, settings=self.metrics_settings)
            stack.callback(self._release_metrics)
        self.canary = CanaryRunner(bus, pool, self.catalog, metrics=self.metrics)
        self.leadership = leadership = Leadership(
            bus.js,
            service=SOURCE,
            bucket=s.core_lease_bucket,
            ttl=s.lease_ttl_seconds,
            lead=self._lead,
            step_down=self._step_down,
        )
        await leadership.open(stack)  # stops after all below
        handler = AssemblyHandler(
            bus=bus,
            catalog=self.catalog,
            requests=requests,
            memory=MemoryClient(bus.nc, timeout=s.memory_timeout, enabled=s.memory_enabled),
            catalog_caught_up=self.catalog_caught_up,
            concurrency=s.assembly_concurrency,
            lab_sources=LabSourceReader(pool, bus.js),
            task_teams=functools.partial(task_team, pool),
        )
        self.assembly = bus.consumer(
            assembly_consumer_spec(f"{s.consumer_prefix}_assembly", s.fetch_timeout), handler
        )
        await self.assembly.start()
        stack.push_async_callback(self.assembly.stop)
        await self._start_sweepers(stack, bus)
        self.queries = CoreQueries(bus, pool, self.catalog, leadership=leadership.status)
        await self.queries.start()
        stack.push_async_callback(self.queries.stop)

    def _runners(self) -> tuple[ProjectionRunner | MongoCatalogRunner, ProjectionRunner]:
        """Fresh projection runners (a stopped runner does not start again)."""
        s = self.settings
        fence = self._fence
        catalog: ProjectionRunner | MongoCatalogRunner
        if self._mongo_store is not None:
            # MongoDB applies each event keyed by its stream sequence: idempotent unfenced.
            catalog = MongoCatalogRunner(
                self.bus,
                self._mongo_store,
                batch=s.projection_batch,
                fetch_timeout=s.fetch_timeout,
                consumer=f"{s.consumer_prefix}_catalog_mongo",
            )
        else:
            catalog = FencedProjectionRunner(
                self.bus, self.pool, CatalogProjection(), fence=fence,
                batch=s.projection_batch, fetch_timeout=s.fetch_timeout,
            )  # fmt: skip
        wake = None if self.canary is None else self.canary.wake
        views = FencedProjectionRunner(
            self.bus, self.pool, [AgentRunsProjection(on_canary_end=wake), BoardProjection()],
            fence=fence,
            batch=s.projection_batch, fetch_timeout=s.fetch_timeout,
        )  # fmt: skip
        return catalog, views

    async def _fence(self) -> bool:
        return self.leadership is not None and await self.leadership.fence()

    async def _prepare(self, pool: asyncpg.Pool[Any]) -> None:
        """Create the projections' tables (if missing) on every replica, so a standby answers
        queries before any leader has run; one replica at a time (an advisory lock), since
        concurrent CREATE ... IF NOT EXISTS can still collide."""
        async with one_replica_at_a_time(pool, _PREPARE_LOCK):
            for runner in self._runners():
                await runner.setup()

    async def _lead(self) -> None:
        """Taking the lease: the projections resume from their checkpoints, then metrics."""
        catalog, views = self._runners()
        self.catalog_runner, self.views_runner = catalog, views
        for runner in (catalog, views):
            await runner.start()
        if self.metrics is not None:
            self.metrics.followers = tuple(self.followers())
            await self.metrics.start()
        if self.canary is not None:
            await self.canary.start()

    async def _step_down(self) -> None:
        """Losing or handing over the lease: metrics stop, each projection commits its batch
        in hand (a fenced one, refused, commits nothing) and stops."""
        if self.canary is not None:
            await self.canary.stop()
        if self.metrics is not None:
            await self.metrics.stop()
        runners = self.followers()
        self.catalog_runner = self.views_runner = None
        await _stop_all(runners)

    async def _start_sweepers(self, stack: contextlib.AsyncExitStack, bus: Bus) -> None:
        """The durable readers that dead-letter poison on NEXUS_INBOX and NEXUS_CHANNELS."""
        s = self.settings
        for spec in sweeper_specs(s.consumer_prefix, s.fetch_timeout):
            sweeper = bus.consumer(spec, accept)
            await sweeper.start()
            stack.push_async_callback(sweeper.stop)
            self.sweepers.append(sweeper)

    def _release_metrics(self) -> None:
        self.metrics = None  # stopped by the step-down, released with core

    async def catalog_fresh(self) -> bool:
        """Whether the catalog projection has applied everything in NEXUS_CATALOG."""
        return await self.catalog_caught_up(0)

    async def catalog_caught_up(self, within: float) -> bool:
        """Wait up to `within` seconds until the catalog projection has applied everything
        NEXUS_CATALOG holds now; return whether it has. The leader asks its runner; a
        standby reads the checkpoint the leader stores."""
        last = (await self.bus.js.stream_info(CATALOG)).state.last_seq
        deadline = asyncio.get_running_loop().time() + within
        while await self._catalog_checkpoint() < last:
            left = deadline - asyncio.get_running_loop().time()
            if left <= 0:
                return False
            runner = self.catalog_runner
            if runner is None:
                await asyncio.sleep(min(CATALOG_POLL_SECONDS, left))
                continue
            try:
                await runner.wait_until(CATALOG, last, within=left)
            except TimeoutError:
                return False
        return True

    async def _catalog_checkpoint(self) -> int:
        runner = self.catalog_runner
        if runner is not None:
            return runner.last_seq.get(CATALOG, 0)
        if self._mongo_store is not None:
            return await self._mongo_store.checkpoint(CATALOG)
        async with self.pool.acquire() as conn:
            return await read_checkpoint(conn, CATALOG_SCHEMA, CATALOG)


async def _stop_all(runners: list[ProjectionRunner | MongoCatalogRunner]) -> None:
    await asyncio.gather(*(r.stop() for r in runners))
