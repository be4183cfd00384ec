"""Wiring and lifecycle of the flows service.

Start: health endpoint, NATS and PostgreSQL, streams, the flows tables, the campaign for the
flows lease, the queries. Stop (SIGTERM) unwinds it in reverse: not ready at once, queries,
then the leader steps down (consumers finish their batch, the engine its pass, the projection
its batch) and hands the lease over, connections close, health last.

Several replicas may run: the holder of the KV lease (`nexus_events.runtime.leadership`) alone runs
the flows projection (NEXUS_FLOWS -> schema flows, fenced by the lease) with the engine woken
after each batch, the timer loop inside the engine, and the run/inbox/webhook consumers, so
one replica decides; every replica answers queries from PostgreSQL.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

import asyncpg
from nexus_events.runtime.clock import Clock
from nexus_events.runtime.leadership import Leadership
from nexus_events.runtime.metrics import MetricsSettings, setup_metrics
from nexus_events.runtime.process import ServiceApp
from nexus_events.transport.bus import Bus, BusSettings, Consumer
from nexus_events.transport.projection import one_replica_at_a_time

from nexus_flows.bridges import Bridges, inbox_spec, runs_spec, webhooks_spec
from nexus_flows.config import FlowsSettings
from nexus_flows.engine import Engine, FlowsRunner
from nexus_flows.metrics import FlowMetrics
from nexus_flows.queries import FlowsQueries
from nexus_flows.store import SCHEMA, FlowsProjection

log = logging.getLogger(__name__)

SOURCE = "flows"
# Replicas create the flows tables one at a time (concurrent CREATE IF NOT EXISTS collide).
_PREPARE_LOCK = "nexus_flows:prepare"


class FlowsApp(ServiceApp):
    """The flows service. `bus`/`pool` may be given (tests); otherwise they are created."""

    def __init__(
        self,
        settings: FlowsSettings | None = None,
        *,
        bus_settings: BusSettings | None = None,
        bus: Bus | None = None,
        pool: asyncpg.Pool[Any] | None = None,
        schema: str = SCHEMA,
        clock: Clock | None = None,
    ) -> None:
        self.settings = settings or FlowsSettings()
        self.clock = clock  # the engine's; None: the system clock
        self.bus_settings = bus_settings
        self.schema = schema
        super().__init__("flows", bus=bus, pool=pool)
        self.projection = FlowsProjection(schema)
        # The leader's engine, projection runner and consumers (None and [] on a standby).
        self.engine: Engine | None = None
        self.runner: FlowsRunner | None = None
        self.consumers: list[Consumer] = []
        self.leadership: Leadership | None = None
        self.queries: FlowsQueries | None = None
        self.metrics: FlowMetrics | None = None

    def ready(self) -> bool:
        """Connected, campaigning for the lease (leading or standing by), and the projection
        not stuck."""
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
        pool = self.pool
        # Exported to OTLP and/or Prometheus when configured (NEXUS_METRICS_*, OTEL_*).
        provider = setup_metrics(SOURCE, MetricsSettings())
        stack.callback(provider.shutdown)
        self.metrics = FlowMetrics(provider)
        await self._prepare(pool)
        self.leadership = Leadership(
            bus.js,
            service=SOURCE,
            bucket=s.flows_lease_bucket,
            ttl=s.lease_ttl_seconds,
            lead=self._lead,
            step_down=self._step_down,
        )
        await self.leadership.open(stack)  # stops after the queries
        self.queries = FlowsQueries(bus.nc, pool, self.schema)
        await self.queries.start()
        stack.push_async_callback(self.queries.stop)

    def _new_runner(self, engine: Engine) -> FlowsRunner:
        s = self.settings
        return FlowsRunner(
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
        """The flows tables on every replica, so a standby answers queries before any leader
        has run."""
        runner = self._new_runner(self._new_engine())
        async with one_replica_at_a_time(pool, _PREPARE_LOCK):
            await runner.setup()

    def _new_engine(self) -> Engine:
        s = self.settings
        return Engine(
            self.bus,
            self.pool,
            schema=self.schema,
            timer_interval=s.timer_interval,
            catalog_timeout=s.catalog_timeout,
            catalog_retry=s.catalog_retry,
            metrics=self.metrics,
            concurrency=s.engine_concurrency,
            clock=self.clock,
        )

    async def _lead(self) -> None:
        """Taking the lease: the projection resumes from its checkpoint, the engine from the
        runs not yet ended, then the consumers that feed it. Fresh each time (a stopped
        runner or engine does not start again)."""
        s = self.settings
        self.engine = engine = self._new_engine()
        self.runner = runner = self._new_runner(engine)
        await runner.start()
        await engine.start()
        bridges = Bridges(self.bus, self.pool, engine, self.schema)
        p, t = s.consumer_prefix, s.fetch_timeout
        for spec, handler in (
            (runs_spec(p, t), bridges.on_runs),
            (inbox_spec(p, t), bridges.on_inbox),
            (webhooks_spec(p, t), bridges.on_webhooks),
        ):
            consumer = self.bus.consumer(spec, handler)
            self.consumers.append(consumer)
            await consumer.start()

    async def _step_down(self) -> None:
        """Losing or handing over the lease: the consumers finish their batch, the engine its
        pass, the projection its batch (a fenced one, refused, commits nothing)."""
        consumers, self.consumers = self.consumers, []
        await asyncio.gather(*(c.stop() for c in consumers))
        engine, self.engine = self.engine, None
        if engine is not None:
            await engine.stop()
        runner, self.runner = self.runner, None
        if runner is not None:
            await runner.stop()
