"""Wiring and lifecycle of the spend service.

Start: health endpoint, NATS and PostgreSQL, streams, the spend tables (one replica at a
time), the campaign for the spend lease, the approval decisions on budget asks, and the
`nexus-spend` micro service (queries, reservations, admissions). Stop (SIGTERM) unwinds it in
reverse: the endpoints, the decisions consumer, then the leader steps down (the projection
finishes its batch, the ask expiry its step) and hands the lease over, connections close,
health last.

Several replicas may run: the holder of the KV lease alone folds the projection ``spend``
(fenced by the lease), announces thresholds and closes expired asks; every replica answers
reservations and queries from PostgreSQL (row locks keep a reservation atomic across them).
"""

from __future__ import annotations

import contextlib
import logging
from typing import Any

import asyncpg
from nats.micro.service import Service
from nexus_events.runtime.clock import Clock, SystemClock
from nexus_events.runtime.leadership import Leadership
from nexus_events.runtime.metrics import MetricsSettings, setup_metrics
from nexus_events.runtime.periodic import PeriodicTask
from nexus_events.runtime.process import ServiceApp
from nexus_events.transport import micro
from nexus_events.transport.bus import BusSettings
from nexus_events.transport.projection import one_replica_at_a_time

from nexus_spend.asks import AskDecisions, AskExpiry
from nexus_spend.config import SpendSettings
from nexus_spend.metrics import SpendMetrics
from nexus_spend.projection import SpendProjection
from nexus_spend.projection_runner import SpendRunner
from nexus_spend.queries import SERVICE_NAME, SpendQueries
from nexus_spend.reservations import Reservations
from nexus_spend.run_endpoints import run_endpoints
from nexus_spend.schema import LIVE_SCHEMA, SCHEMA

log = logging.getLogger(__name__)

SOURCE = "spend"
# Replicas create the spend tables one at a time (concurrent CREATE IF NOT EXISTS collide).
_PREPARE_LOCK = "nexus_spend:prepare"
# How often the leader closes expired asks and reads the gauges: an ask's expiry is minutes
# to hours, a few seconds late is nothing.
_LEADER_INTERVAL = 2.0


class SpendApp(ServiceApp):
    """The spend service. `bus`/`pool` may be given (tests); otherwise they are created."""

    def __init__(
        self,
        settings: SpendSettings | None = None,
        *,
        bus_settings: BusSettings | None = None,
        bus: Any = None,
        pool: asyncpg.Pool[Any] | None = None,
        schema: str = SCHEMA,
        live_schema: str = LIVE_SCHEMA,
        clock: Clock | None = None,
    ) -> None:
        self.settings = settings or SpendSettings()
        self.clock: Clock = clock or SystemClock()
        self.bus_settings = bus_settings
        super().__init__("spend", bus=bus, pool=pool)
        self.projection = SpendProjection(schema, live_schema)
        self.metrics = SpendMetrics()
        self.runner: SpendRunner | None = None
        self.leader_tasks: PeriodicTask | None = None
        self.expiry: AskExpiry | None = None
        self.decisions: AskDecisions | None = None
        self.leadership: Leadership | None = None
        self.service: Service | None = None

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
        self.metrics = SpendMetrics(provider)
        async with one_replica_at_a_time(self.pool, _PREPARE_LOCK):
            await self._new_runner().setup()
        self.leadership = Leadership(
            bus.js,
            service=SOURCE,
            bucket=s.spend_lease_bucket,
            ttl=s.lease_ttl_seconds,
            lead=self._lead,
            step_down=self._step_down,
        )
        await self.leadership.open(stack)
        self.decisions = AskDecisions(self.pool, bus, self.clock, fetch_timeout=s.fetch_timeout)
        await self.decisions.start()
        stack.push_async_callback(self.decisions.stop)
        p = self.projection
        queries = SpendQueries(bus.nc, self.pool, schema=p.schema, clock=self.clock)
        reservations = Reservations(
            self.pool, bus, self.clock, schema=p.schema, live_schema=p.live_schema
        )
        self.service = await micro.start_service(
            bus.nc,
            SERVICE_NAME,
            "Nexus spend: usage, budgets and reservations",
            [*queries.endpoints(), *run_endpoints(reservations)],
        )
        stack.push_async_callback(self._stop_service)

    async def _stop_service(self) -> None:
        service, self.service = self.service, None
        await micro.stop_service(service)

    def _new_runner(self) -> SpendRunner:
        s = self.settings
        return SpendRunner(
            self.bus,
            self.pool,
            self.projection,
            metrics=self.metrics,
            fence=self._fence,
            batch=s.projection_batch,
            fetch_timeout=s.fetch_timeout,
        )

    async def _fence(self) -> bool:
        return self.leadership is not None and await self.leadership.fence()

    async def _lead(self) -> None:
        """Taking the lease: the projection resumes from its checkpoint; the ask expiry and
        the gauges run on an interval. Fresh each time."""
        self.runner = runner = self._new_runner()
        await runner.start()
        self.expiry = expiry = AskExpiry(
            self.pool, self.bus, self.clock, schema=self.projection.schema
        )

        async def step() -> None:
            await expiry.step()
            p = self.projection
            await self.metrics.read_gauges(self.pool, p.schema, p.live_schema)

        self.leader_tasks = PeriodicTask(
            step, _LEADER_INTERVAL, name="spend ask expiry", logger=log, stop_grace=2.0
        )
        self.leader_tasks.start()

    async def _step_down(self) -> None:
        tasks, self.leader_tasks = self.leader_tasks, None
        if tasks is not None:
            await tasks.stop()
        self.expiry = None
        runner, self.runner = self.runner, None
        if runner is not None:
            await runner.stop()
