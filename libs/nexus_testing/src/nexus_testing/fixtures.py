"""The pytest plugin of the workspace (``-p nexus_testing.fixtures`` in the root pyproject): real
servers per test (nats-server with JetStream, a three-node cluster) and one PostgreSQL per
session with a fresh database per test."""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from nexus_testing.nats_cluster import NatsCluster
from nexus_testing.nats_server import NatsServer
from nexus_testing.postgres import PostgresServer

if TYPE_CHECKING:
    import asyncpg
    from nexus_events.transport.bus import Bus


@pytest.fixture
def nats_server(tmp_path: Path) -> Iterator[NatsServer]:
    """A fresh nats-server with JetStream for one test."""
    server = NatsServer(tmp_path / "nats")
    server.start()
    try:
        yield server
    finally:
        server.stop(kill=True)


@pytest.fixture
def nats_cluster(tmp_path: Path) -> Iterator[NatsCluster]:
    """A fresh three-node JetStream cluster for one test (ready: a meta leader elected)."""
    cluster = NatsCluster(tmp_path / "cluster", 3)
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop(kill=True)


@pytest.fixture
def nats_url(nats_server: NatsServer) -> str:
    return nats_server.url


@pytest.fixture
async def bus(nats_url: str) -> AsyncIterator[Bus]:
    """A connected `Bus` (source ``test``) on the test's server, with every stream ensured."""
    from nexus_events.contract.streams import ensure_streams
    from nexus_events.transport.bus import Bus, BusSettings

    b = await Bus.connect(BusSettings(url=nats_url, name="test"), source="test")
    await ensure_streams(b.js)
    try:
        yield b
    finally:
        await b.close()


@pytest.fixture(scope="session")
def postgres_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PostgresServer]:
    """One real PostgreSQL for the whole test session."""
    # Keep the path short: the server's unix socket lives under it (108-byte limit).
    base = Path(tempfile.mkdtemp(prefix="nxpg-"))
    server = PostgresServer(base)
    try:
        yield server
    finally:
        server.close()
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
async def pg_dsn(postgres_server: PostgresServer) -> str:
    """DSN of a fresh, empty database for this test (pgvector can be enabled in it)."""
    return await postgres_server.create_database()


@pytest.fixture
async def pg_pool(pg_dsn: str) -> AsyncIterator[asyncpg.Pool[Any]]:
    import asyncpg

    pool = await asyncpg.create_pool(pg_dsn, min_size=1, max_size=4)
    assert pool is not None
    try:
        yield pool
    finally:
        await asyncio.wait_for(pool.close(), timeout=10)
