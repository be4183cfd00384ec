"""Wiring and lifecycle of the flows service.

Start: health endpoint, NATS and PostgreSQL, streams, the flows projection (NEXUS_FLOWS ->
schema flows) with the engine woken after each batch, the run/inbox/webhook consumers, the
timer loop (inside the engine) and the queries. Stop (SIGTERM) unwinds it in reverse: not
ready at once, queries, consumers finish their batch, the engine its pass, the projection its
batch, connections close, health last.

One flows instance at a time: nothing here elects a leader (two instances would publish the
same events with the same message ids, which is harmless but wasteful).
"""

from __future__ import annotations

import contextlib
import logging
from typing import Any

import asyncpg
from nexus_events.bus import Bus, BusSettings, Consumer
from nexus_events.health import HealthServer
from nexus_events.metrics import MetricsSettings, setup_metrics
from nexus_events.process import ServiceApp
from nexus_events.streams import ensure_streams

from nexus_flows.bridges import Bridges, inbox_spec, runs_spec, webhooks_spec
from nexus_flows.config import FlowsSettings
from nexus_flows.engine import Engine, FlowsRunner
from nexus_flows.metrics import FlowMetrics
from nexus_flows.queries import FlowsQueries
from nexus_flows.store import SCHEMA, FlowsProjection

log = logging.getLogger(__name__)

SOURCE = "flows"


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
    ) -> None:
        self.settings = settings or FlowsSettings()
        self.bus_settings = bus_settings
        self.schema = schema
        super().__init__("flows", bus=bus, pool=pool)
        self.projection = FlowsProjection(schema)
        self.engine: Engine | None = None
        self.runner: FlowsRunner | None = None
        self.consumers: list[Consumer] = []
        self.queries: FlowsQueries | None = None
        self.health: HealthServer | None = None

    def ready(self) -> bool:
        stuck = self.runner is not None and self.runner.stuck
        return self._running and self.nats_connected and not stuck

    async def open(self, stack: contextlib.AsyncExitStack) -> None:
        s = self.settings
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
        await ensure_streams(bus.js, update=False)
        # Exported to OTLP and/or Prometheus when configured (NEXUS_METRICS_*, OTEL_*).
        provider = setup_metrics(SOURCE, MetricsSettings())
        stack.callback(provider.shutdown)
        metrics = FlowMetrics(provider)
        self.engine = engine = Engine(
            bus,
            pool,
            schema=self.schema,
            timer_interval=s.timer_interval,
            catalog_timeout=s.catalog_timeout,
            catalog_retry=s.catalog_retry,
            metrics=metrics,
            concurrency=s.engine_concurrency,
        )
        self.runner = FlowsRunner(
            bus,
            pool,
            self.projection,
            engine=engine,
            batch=s.projection_batch,
            fetch_timeout=s.fetch_timeout,
        )
        await self.runner.start()
        stack.push_async_callback(self.runner.stop)
        await engine.start()
        stack.push_async_callback(engine.stop)
        bridges = Bridges(bus, pool, engine, self.schema)
        p, t = s.consumer_prefix, s.fetch_timeout
        for spec, handler in (
            (runs_spec(p, t), bridges.on_runs),
            (inbox_spec(p, t), bridges.on_inbox),
            (webhooks_spec(p, t), bridges.on_webhooks),
        ):
            consumer = bus.consumer(spec, handler)
            await consumer.start()
            stack.push_async_callback(consumer.stop)
            self.consumers.append(consumer)
        self.queries = FlowsQueries(bus.nc, pool, self.schema)
        await self.queries.start()
        stack.push_async_callback(self.queries.stop)
