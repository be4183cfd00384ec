"""Wiring and lifecycle of the lab service.

Start: health endpoint, NATS and PostgreSQL, streams, the lab tables, the campaign for the
lab lease, the queries. Stop (SIGTERM) unwinds it in reverse: queries, then the leader steps
down (the runs consumer finishes its batch, the engine its pass, the projection its batch) and
hands the lease over, connections close, health last.

Several replicas may run: the holder of the KV lease alone folds NEXUS_CATALOG's suites and
NEXUS_EVALS into schema ``lab`` (fenced by the lease), runs the engine woken after each batch
and consumes NEXUS_RUNS' terminal events, so one replica decides; every replica answers
queries from PostgreSQL.
"""

from __future__ import annotations

import contextlib
import logging
from typing import Any

import asyncpg
from nexus_events.runtime.clock import Clock
from nexus_events.runtime.leadership import Leadership
from nexus_events.runtime.metrics import MetricsSettings, setup_metrics
from nexus_events.runtime.process import ServiceApp
from nexus_events.transport.bus import BusSettings, Consumer
from nexus_events.transport.projection import one_replica_at_a_time

from nexus_lab.config import LabSettings
from nexus_lab.engine import Engine, LabRunner
from nexus_lab.metrics import LabMetrics
from nexus_lab.queries import LabQueries
from nexus_lab.runs_consumer import RunEndings, runs_spec
from nexus_lab.store import SCHEMA, LabProjection

log = logging.getLogger(__name__)

SOURCE = "lab"
# Replicas create the lab tables one at a time (concurrent CREATE IF NOT EXISTS collide).
_PREPARE_LOCK = "nexus_lab:prepare"


class LabApp(ServiceApp):
    """The lab service. `bus`/`pool` may be given (tests); otherwise they are created."""

    def __init__(
        self,
        settings: LabSettings | None = None,
        *,
        bus_settings: BusSettings | None = None,
        bus: Any = None,
        pool: asyncpg.Pool[Any] | None = None,
        schema: str = SCHEMA,
        clock: Clock | None = None,
    ) -> None:
        self.settings = settings or LabSettings()
        self.clock = clock
        self.bus_settings = bus_settings
        self.schema = schema
        super().__init__("lab", bus=bus, pool=pool)
        self.projection = LabProjection(schema)
        self.engine: Engine | None = None
        self.runner: LabRunner | None = None
        self.consumer: Consumer | None = None
        self.leadership: Leadership | None = None
        self.queries: LabQueries | None = None
        self.metrics: LabMetrics | None = None

    def ready(self) -> bool:
        """Connected, campaigning for the lease, and the projection not stuck."""
        stuck = self.runner is not None and self.runner.stuck
        return (
            super().ready()
            and self.leadership is not None
            and self.leadership.campaigning
            and not stuck
        )

    async def open(self, stack: contextlib.AsyncExitStack) -> None:
        s = self.settings
        bus = await self.open_runtime(
            stack, s, bus_settings=self.bus_settings, source=SOURCE, create_pool=s.create_pool
        )
        provider = setup_metrics(SOURCE, MetricsSettings())
        stack.callback(provider.shutdown)
        self.metrics = LabMetrics(provider)
        await self._prepare(self.pool)
        self.leadership = Leadership(
            bus.js,
            service=SOURCE,
            bucket=s.lab_lease_bucket,
            ttl=s.lease_ttl_seconds,
            lead=self._lead,
            step_down=self._step_down,
        )
        await self.leadership.open(stack)
        self.queries = LabQueries(bus.nc, self.pool, self.schema)
        await self.queries.start()
        stack.push_async_callback(self.queries.stop)

    def _new_engine(self) -> Engine:
        s = self.settings
        return Engine(
            self.bus,
            self.pool,
            schema=self.schema,
            interval=s.retry_interval,
            query_timeout=s.query_timeout,
            metrics=self.metrics,
            clock=self.clock,
        )

    def _new_runner(self, engine: Engine) -> LabRunner:
        s = self.settings
        return LabRunner(
            self.bus,
            self.pool,
            self.projection,
            engine=engine,
            fence=self._fence,
            batch=s.projection_batch,
            fetch_timeout=s.fetch_timeout,
        )

    async def _fence(self) -> bool:
        return self.leadership is not None and await self.leadership.fence()

    async def _prepare(self, pool: asyncpg.Pool[Any]) -> None:
        """The lab tables on every replica, so a standby answers queries before any leader
        has run."""
        runner = self._new_runner(self._new_engine())
        async with one_replica_at_a_time(pool, _PREPARE_LOCK):
            await runner.setup()

    async def _lead(self) -> None:
        """Taking the lease: the projection resumes from its checkpoint, the engine from the
        eval runs not yet ended, then the runs consumer that feeds it. Fresh each time."""
        s = self.settings
        self.engine = engine = self._new_engine()
        self.runner = runner = self._new_runner(engine)
        await runner.start()
        await engine.start()
        endings = RunEndings(self.pool, engine, self.schema)
        self.consumer = self.bus.consumer(
            runs_spec(s.consumer_prefix, s.fetch_timeout), endings.on_runs
        )
        await self.consumer.start()

    async def _step_down(self) -> None:
        consumer, self.consumer = self.consumer, None
        if consumer is not None:
            await consumer.stop()
        engine, self.engine = self.engine, None
        if engine is not None:
            await engine.stop()
        runner, self.runner = self.runner, None
        if runner is not None:
            await runner.stop()
