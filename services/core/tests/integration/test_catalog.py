"""Catalog: apply/delete publish events; the projection keeps every revision in schema core."""

from __future__ import annotations

from typing import Any

import asyncpg
import pytest
from nexus_events.bus import Bus
from nexus_events.projection import ProjectionRunner, rebuild
from nexus_events.streams import CATALOG

from nexus_core.catalog import apply_agent, apply_skill, delete_agent, delete_skill
from nexus_core.catalog_store import CatalogProjection, PgCatalogStore
from nexus_core.errors import DocumentInvalid

from .support import AGENT_YAML, SKILL_MD


async def _last_seq(bus: Bus) -> int:
    return (await bus.js.stream_info(CATALOG)).state.last_seq


async def test_apply_update_delete_keeps_history(bus: Bus, pg_pool: asyncpg.Pool[Any]):
    store = PgCatalogStore(pg_pool)
    async with ProjectionRunner(bus, pg_pool, CatalogProjection(), fetch_timeout=0.2) as runner:
        await apply_agent(bus, AGENT_YAML, applied_by="ops")
        await apply_agent(bus, AGENT_YAML)  # unchanged: no new revision
        await apply_agent(bus, AGENT_YAML.replace("You implement", "You build"))
        await runner.wait_until(CATALOG, await _last_seq(bus))
        stored = await store.get_agent("implementer")
        assert stored is not None
        assert stored.revision == 2
        assert stored.definition.system_prompt == "You build tasks."
        assert [a.definition.id for a in await store.list_agents()] == ["implementer"]

        await delete_agent(bus, "implementer", deleted_by="ops")
        await runner.wait_until(CATALOG, await _last_seq(bus))
        assert await store.get_agent("implementer") is None
        assert await store.list_agents() == []
        history = await store.agent_history("implementer")
        assert [(rev, deleted) for rev, deleted, _ in history] == [
            (1, False),
            (2, False),
            (3, True),
        ]

        await apply_agent(bus, AGENT_YAML)  # back again, as revision 4
        await runner.wait_until(CATALOG, await _last_seq(bus))
        stored = await store.get_agent("implementer")
        assert stored is not None
        assert stored.revision == 4


async def test_skill_versions_and_pins(bus: Bus, pg_pool: asyncpg.Pool[Any]):
    store = PgCatalogStore(pg_pool)
    async with ProjectionRunner(bus, pg_pool, CatalogProjection(), fetch_timeout=0.2) as runner:
        await apply_skill(bus, SKILL_MD)
        await apply_skill(bus, SKILL_MD.replace("1.0.0", "2.0.0").replace("uv", "uv 2"))
        await runner.wait_until(CATALOG, await _last_seq(bus))
        latest = await store.get_skill("python")
        pinned = await store.get_skill("python", "1.0.0")
        assert latest is not None
        assert pinned is not None
        assert (latest.skill.version, latest.revision) == ("2.0.0", 2)
        assert (pinned.skill.version, pinned.revision, pinned.skill.content) == (
            "1.0.0",
            1,
            "# Python\nUse uv.",
        )
        assert await store.get_skill("python", "9") is None

        await delete_skill(bus, "python")
        await apply_skill(bus, SKILL_MD.replace("1.0.0", "3.0.0"))
        await runner.wait_until(CATALOG, await _last_seq(bus))
        # Versions from before the delete are gone for pins; history stays in the table.
        assert await store.get_skill("python", "1.0.0") is None
        current = await store.get_skill("python", "3.0.0")
        assert current is not None
        assert current.revision == 4
        assert [s.skill.version for s in await store.list_skills()] == ["3.0.0"]
        count = await pg_pool.fetchval("SELECT count(*) FROM core.skill_revisions")
        assert count == 4


async def test_invalid_document_publishes_nothing(bus: Bus):
    with pytest.raises(DocumentInvalid) as info:
        await apply_agent(bus, "id: x\nrole: wizard\n")
    assert {e.loc for e in info.value.errors} == {"role", "model", "system_prompt"}
    assert await _last_seq(bus) == 0


async def test_rebuild_equals_live(bus: Bus, pg_pool: asyncpg.Pool[Any]):
    async with ProjectionRunner(bus, pg_pool, CatalogProjection(), fetch_timeout=0.2) as runner:
        await apply_agent(bus, AGENT_YAML)
        await apply_skill(bus, SKILL_MD)
        await delete_agent(bus, "implementer")
        await apply_agent(bus, AGENT_YAML.replace("tasks", "things"))
        await runner.wait_until(CATALOG, await _last_seq(bus))
        query = "SELECT * FROM core.agent_revisions ORDER BY id, revision"
        before = [dict(r) for r in await pg_pool.fetch(query)]
        await rebuild(bus, pg_pool, CatalogProjection())
        after = [dict(r) for r in await pg_pool.fetch(query)]
    assert before == after
    assert len(after) == 3
