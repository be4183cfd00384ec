"""Fixtures of the lab's integration tests: a real core and a scripted runner on the test's
NATS and database, and lab apps that stop at the end."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import asyncpg
import pytest
from nexus_core.app import CoreApp
from nexus_core.config import CoreSettings
from nexus_events.transport.bus import Bus

from nexus_lab.app import LabApp

from .harness import RUNNERS, STARTED, Script, ScriptedRunner, start_lab


@pytest.fixture
async def core(bus: Bus, pg_dsn: str) -> AsyncIterator[CoreApp]:
    """A core on the test's NATS and database, on its own pool as in core's own tests: on the
    lab's pool of 4 its projections and queries starved the lab's engine under load."""
    settings = CoreSettings(health_port=None, memory_enabled=False, fetch_timeout=0.2)
    pool = await asyncpg.create_pool(pg_dsn, min_size=1, max_size=12)
    assert pool is not None
    app = CoreApp(settings, bus=bus, pool=pool)
    await app.start()
    try:
        yield app
    finally:
        await app.stop()
        await pool.close()


@pytest.fixture
async def labs(
    bus: Bus, pg_pool: asyncpg.Pool[Any]
) -> AsyncIterator[Callable[[], Awaitable[LabApp]]]:
    async def make() -> LabApp:
        return await start_lab(bus, pg_pool)

    yield make
    for app in STARTED:  # every lab `start_lab` made (a stop of one that never started is a no-op)
        await app.stop()
    STARTED.clear()


@pytest.fixture
async def runner(bus: Bus) -> AsyncIterator[Callable[[Script], Awaitable[ScriptedRunner]]]:
    async def make(script: Script) -> ScriptedRunner:
        r = ScriptedRunner(bus, script)
        await r.start()
        return r

    yield make
    for r in RUNNERS:  # every scripted runner started (`ScriptedRunner.start` lists it)
        await r.stop()
    RUNNERS.clear()
