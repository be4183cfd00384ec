"""Fixtures of the plane-sync tests: a fake Plane (tests/fakes/plane.py) wired to a started
PlaneSyncApp on the real NATS and PostgreSQL of nexus_testing."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
from nexus_events.transport.bus import Bus
from nexus_testing import free_port
from tests.fakes.plane import FakePlane

from nexus_plane_sync.app import PlaneSyncApp
from nexus_plane_sync.config import PlaneSyncSettings

WEBHOOK_SECRET = "whsec-test"

MakeSync = Callable[..., Awaitable[PlaneSyncApp]]


def sync_settings(plane: FakePlane, pg_dsn: str, **overrides: Any) -> PlaneSyncSettings:
    values: dict[str, Any] = {
        "database_url": pg_dsn,
        "plane_url": plane.url,
        "plane_api_key": plane.api_key,
        "plane_workspace": plane.workspace,
        "plane_project_id": plane.project_id,
        "plane_webhook_secret": WEBHOOK_SECRET,
        "plane_agent_runs": "off",
        "plane_rate_per_minute": 60_000,
        "plane_burst": 100,
        "plane_retries": 1,
        "plane_retry_max": 0.2,
        "plane_timeout": 2.0,
        "webhook_host": "127.0.0.1",
        "webhook_port": 0,
        "health_port": None,
        "outbox_poll": 0.2,
        "fetch_timeout": 0.2,
        **overrides,
    }
    return PlaneSyncSettings(**values)


@pytest.fixture
async def plane() -> AsyncIterator[FakePlane]:
    async with FakePlane() as fake:
        yield fake
        await fake.settle()


@pytest.fixture
async def make_sync(bus: Bus, pg_dsn: str, plane: FakePlane) -> AsyncIterator[MakeSync]:
    """Start PlaneSyncApps on the test's bus, database and fake Plane (its webhook pointed at
    the app); all are stopped at the end."""
    apps: list[PlaneSyncApp] = []
    port = free_port()  # one port for every app of a test: a restarted app gets the webhooks

    async def make(**overrides: Any) -> PlaneSyncApp:
        overrides.setdefault("webhook_port", port)
        app = PlaneSyncApp(sync_settings(plane, pg_dsn, **overrides), bus=bus)
        await app.start()
        apps.append(app)
        url = f"http://127.0.0.1:{app.settings.webhook_port}/webhooks/plane"
        if not any(h.url == url for h in plane.webhooks):
            plane.add_webhook(url, WEBHOOK_SECRET)
        return app

    yield make
    for app in reversed(apps):
        if app._running:
            await app.stop()


@pytest.fixture
async def sync(make_sync: MakeSync) -> PlaneSyncApp:
    return await make_sync()
