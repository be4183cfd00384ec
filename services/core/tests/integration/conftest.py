"""Fixtures of core's integration tests: a running CoreApp on the test's NATS and database."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import pytest
from nexus_events.bus import Bus

from nexus_core.app import CoreApp
from nexus_core.config import CoreSettings


def core_settings(**overrides: Any) -> CoreSettings:
    values: dict[str, Any] = {
        "health_port": 0,
        "memory_timeout": 0.2,
        "projection_batch": 200,
        "fetch_timeout": 0.2,
    }
    values.update(overrides)
    return CoreSettings(**values)


@pytest.fixture
async def core_pool(pg_dsn: str) -> AsyncIterator[asyncpg.Pool[Any]]:
    pool = await asyncpg.create_pool(pg_dsn, min_size=1, max_size=12)
    assert pool is not None
    try:
        yield pool
    finally:
        await pool.close()


@pytest.fixture
async def core(bus: Bus, core_pool: asyncpg.Pool[Any]) -> AsyncIterator[CoreApp]:
    app = CoreApp(core_settings(), bus=bus, pool=core_pool)
    await app.start()
    try:
        yield app
    finally:
        await app.stop()
