"""`ServiceApp.open_runtime`, the start-up every service shares, on real NATS and PostgreSQL:
its order, its readiness, and that a stop or a failed start closes what it opened."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any

import asyncpg
import pytest
from nexus_events.contract.streams import RUNS, SCHEDULES
from nexus_events.runtime.process import ServiceApp
from nexus_events.transport.connect import BusSettings
from nexus_testing import http_status


@dataclass
class Health:
    health_host: str = "127.0.0.1"
    health_port: int | None = 0


class DatabaseDownError(Exception):
    pass


class TinyApp(ServiceApp):
    """A service with nothing of its own: `open` is the shared start-up only; what it saw
    when the pool was asked for is kept."""

    def __init__(
        self,
        nats_url: str,
        pg_dsn: str | None,
        *,
        health: Health | None = None,
        probe_streams: tuple[str, ...] = (),
    ) -> None:
        super().__init__("tiny")
        self.nats_url = nats_url
        self.pg_dsn = pg_dsn
        self.health_settings = health or Health()
        self.probe_streams = probe_streams
        self.seen_at_pool: dict[str, Any] = {}

    async def _create_pool(self) -> asyncpg.Pool[Any]:
        seen = self.seen_at_pool
        seen["connected"] = self.nats_connected
        seen["streams"] = {s.config.name for s in await self.bus.js.streams_info()}
        seen["probe_checks"] = self.jetstream.checks if self.jetstream is not None else None
        if self.health is not None:
            seen["live"] = await http_status(self.health.port, "/healthz")
            seen["ready"] = await http_status(self.health.port, "/readyz")
        if self.pg_dsn is None:
            raise DatabaseDownError("no database here")
        return await asyncpg.create_pool(self.pg_dsn, min_size=1, max_size=2)

    async def open(self, stack: contextlib.AsyncExitStack) -> None:
        await self.open_runtime(
            stack,
            self.health_settings,
            bus_settings=BusSettings(url=self.nats_url),
            source="tiny",
            probe_streams=self.probe_streams,
            probe_interval=0.2,
            create_pool=self._create_pool,
        )


async def test_health_first_then_bus_streams_probe_and_pool_and_all_closed_on_stop(
    nats_url: str, pg_dsn: str
) -> None:
    app = TinyApp(nats_url, pg_dsn, probe_streams=(RUNS, SCHEDULES))
    await app.start()
    try:
        seen = app.seen_at_pool
        # Before the pool: the endpoint is live and not ready, NATS is up, every Nexus stream
        # exists and the probe has checked once.
        assert seen["live"] == 200
        assert seen["ready"] == 503
        assert seen["connected"] is True
        assert {RUNS, SCHEDULES} <= seen["streams"]
        assert seen["probe_checks"] == 1
        assert app.health is not None
        port = app.health.port
        assert await http_status(port, "/readyz") == 200
        assert app.jetstream is not None
        assert app.jetstream.ok
        pool = app.pool
        assert await pool.fetchval("SELECT 1") == 1
    finally:
        await app.stop()
    assert await http_status(port, "/healthz") == 0
    assert not app.nats_connected
    assert pool.is_closing()


async def test_readiness_follows_the_jetstream_probe(nats_url: str, pg_dsn: str) -> None:
    # A stream no Nexus service creates: JetStream cannot store in it, so not ready.
    app = TinyApp(nats_url, pg_dsn, probe_streams=("NEXUS_NO_SUCH_STREAM",))
    async with app:
        assert app.jetstream is not None
        assert app.jetstream.problem is not None
        assert not app.ready()
        assert app.health is not None
        assert await http_status(app.health.port, "/readyz") == 503


async def test_a_failed_pool_closes_the_bus_and_the_endpoint(nats_url: str) -> None:
    app = TinyApp(nats_url, None, probe_streams=(RUNS,))
    with pytest.raises(DatabaseDownError):
        await app.start()
    assert app.seen_at_pool["live"] == 200
    assert app.health is not None
    assert await http_status(app.health.port, "/healthz") == 0
    assert not app.nats_connected
    assert app.jetstream is not None
    assert app.jetstream._task is None  # the probe's loop was stopped


async def test_without_a_health_port_or_probe_only_bus_streams_and_pool(
    nats_url: str, pg_dsn: str
) -> None:
    app = TinyApp(nats_url, pg_dsn, health=Health(health_port=None))
    async with app:
        assert app.health is None
        assert app.jetstream is None
        assert "live" not in app.seen_at_pool
        assert RUNS in app.seen_at_pool["streams"]
        assert app.ready()
