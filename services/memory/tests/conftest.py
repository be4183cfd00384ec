"""Shared fixtures of the memory tests: the real embedder (loaded once), the real NATS and
PostgreSQL from nexus_testing, and a started MemoryApp."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import datetime
from typing import Any

import pytest
from nexus_events.transport.bus import Bus

from nexus_memory.app import MemoryApp
from nexus_memory.config import MemorySettings
from nexus_memory.embedding import WordLlamaEmbedder

MakeApp = Callable[..., Awaitable[MemoryApp]]


@pytest.fixture(scope="session")
def embedder() -> WordLlamaEmbedder:
    return WordLlamaEmbedder()


def memory_settings(pg_dsn: str, **overrides: Any) -> MemorySettings:
    values: dict[str, Any] = {
        "database_url": pg_dsn,
        "health_port": None,
        "memory_consolidation_interval": 0,
        "memory_extraction": False,
        "memory_access_flush": 0.2,
        "fetch_timeout": 0.2,
        **overrides,
    }
    return MemorySettings(**values)


@pytest.fixture
async def make_memory(bus: Bus, pg_dsn: str, embedder: WordLlamaEmbedder) -> AsyncIterator[MakeApp]:
    """Start MemoryApps on the test's bus and database (`clock`: the app's "now"); all are
    stopped at the end."""
    apps: list[MemoryApp] = []

    async def make(clock: Callable[[], datetime] | None = None, **overrides: Any) -> MemoryApp:
        settings = memory_settings(pg_dsn, **overrides)
        app = MemoryApp(settings, bus=bus, embedder=embedder, **({"clock": clock} if clock else {}))
        await app.start()
        apps.append(app)
        return app

    yield make
    for app in reversed(apps):
        if app._running:
            await app.stop()


@pytest.fixture
async def memory(make_memory: MakeApp) -> MemoryApp:
    return await make_memory()
