"""Core with its catalog in MongoDB: assembly and queries read MongoDB, not schema core."""

from __future__ import annotations

from typing import Any

import asyncpg
import pytest
from nexus_events.contract import subjects
from nexus_events.events import RunPrepared
from nexus_events.transport.bus import Bus
from nexus_events.transport.catalog_commands import apply_agent, apply_skill

from nexus_core.app import CoreApp
from nexus_core.errors import CatalogBackendError
from nexus_core.mongo_catalog import MongoCatalogRunner, MongoCatalogStore

from .conftest import core_settings
from .mongo_server import mongo_choice
from .support import (
    AGENT_YAML,
    SKILL_MD,
    catalog_ready,
    eventually,
    mongodb_mode,
    query,
    run_events,
)


@pytest.mark.parametrize("mongodb", [mongodb_mode()])
async def test_core_prepares_runs_from_the_mongodb_catalog(
    bus: Bus, core_pool: asyncpg.Pool[Any], mongo_db, mongodb
):
    # The server is reached through the URL, as in production, in the test's own database.
    settings = core_settings(catalog_url=f"{mongo_choice().url}/{mongo_db.name}")
    app = CoreApp(settings, bus=bus, pool=core_pool)
    async with app:
        assert isinstance(app.catalog, MongoCatalogStore)
        assert isinstance(app.catalog_runner, MongoCatalogRunner)
        await apply_agent(bus, AGENT_YAML)
        await apply_skill(bus, SKILL_MD)
        await apply_agent(bus, AGENT_YAML.replace("You implement", "You build"))
        await catalog_ready(app)
        await bus.js.publish(
            subjects.run_event("r-mongo", "requested"),
            b'{"agent_id": "implementer", "task_id": "T-1", "input": "go"}',
        )
        events = await eventually(
            lambda: run_events(bus, "r-mongo"),
            lambda evs: any(d.address.event in ("prepared", "failed") for d in evs),
        )
        outcome = next(d for d in events if d.address.event in ("prepared", "failed"))
        assert isinstance(outcome.event, RunPrepared)
        config = outcome.event.config
        assert config.system_prompt.startswith("You build tasks.")
        assert config.catalog_revisions == {"agent/implementer": 2, "skill/python": 1}
        error, body = await query(bus, subjects.CORE_CATALOG_AGENTS_GET, {"id": "implementer"})
        assert error is None, body
        assert body["revision"] == 2
    # The PostgreSQL catalog tables were never created: MongoDB served the catalog.
    assert await core_pool.fetchval("SELECT to_regclass('core.agents')") is None


async def test_unknown_catalog_backend_is_refused(bus: Bus, core_pool: asyncpg.Pool[Any]):
    app = CoreApp(core_settings(catalog_url="redis://localhost"), bus=bus, pool=core_pool)
    with pytest.raises(CatalogBackendError, match="redis"):
        await app.start()
