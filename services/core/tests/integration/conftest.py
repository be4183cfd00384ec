"""Fixtures of core's integration tests: a running CoreApp on the test's NATS and database."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import asyncpg
import pytest
from nexus_events.transport.bus import Bus
from nexus_events.transport.projection import ProjectionRunner

from nexus_core.app import CoreApp
from nexus_core.catalog_store import CatalogProjection, PgCatalogStore
from nexus_core.config import CoreSettings
from nexus_core.mongo_catalog import MongoCatalogRunner, MongoCatalogStore
from nexus_core.mongo_catalog import connect as connect_mongo

from .mongo_server import mongo_choice
from .support import mongodb_mode


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


@pytest.fixture
async def mongo_db() -> AsyncIterator[Any]:
    """A fresh MongoDB database through motor's API on the session's server (`mongo_server`:
    NEXUS_TEST_MONGODB_URL, else SecantusDB; the test ids say which). Without a server the
    test fails with the reason: no in-process double stands in."""
    choice = mongo_choice()
    if choice.url is None:
        pytest.fail(f"MongoDB tests need a server: {choice.why}")
    name = f"nexus_test_{uuid.uuid4().hex[:12]}"
    client = connect_mongo(choice.url)
    try:
        yield client[name]
    finally:
        await client.drop_database(name)
        client.close()


@dataclass
class CatalogBackend:
    """One catalog backend under the shared suite: its read store and fresh runners."""

    id: str
    store: Any
    make_runner: Callable[[], Any]


@pytest.fixture(params=["postgresql", mongodb_mode()])
async def catalog_backend(
    request: pytest.FixtureRequest, bus: Bus, pg_pool: asyncpg.Pool[Any], mongo_db: Any
) -> CatalogBackend:
    if request.param == "postgresql":
        return CatalogBackend(
            request.param,
            PgCatalogStore(pg_pool),
            lambda: ProjectionRunner(bus, pg_pool, CatalogProjection(), fetch_timeout=0.2),
        )
    store = MongoCatalogStore(mongo_db)
    return CatalogBackend(
        request.param, store, lambda: MongoCatalogRunner(bus, store, fetch_timeout=0.2)
    )
