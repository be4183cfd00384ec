"""Catalog: apply/delete publish events; each backend keeps every revision.

The shared suite runs against both backends (`catalog_backend`): PostgreSQL for real, and
MongoDB through motor against a real server: NEXUS_TEST_MONGODB_URL (id ``mongodb-real``), else
SecantusDB (id ``mongodb-secantus``). NATS is always the real server.
"""

from __future__ import annotations

from typing import Any

import asyncpg
import pytest
from nexus_events.contract import subjects
from nexus_events.contract.documents import parse_agent
from nexus_events.contract.streams import CATALOG
from nexus_events.contract.subjects import CatalogKind
from nexus_events.errors import DocumentInvalid
from nexus_events.events import AgentApplied
from nexus_events.transport.bus import Bus
from nexus_events.transport.catalog_commands import (
    apply_agent,
    apply_skill,
    delete_agent,
    delete_skill,
)
from nexus_events.transport.projection import ProjectionRunner, rebuild
from pymongo.errors import AutoReconnect

from nexus_core.catalog_store import CatalogProjection, PgCatalogStore
from nexus_core.mongo_catalog import MongoCatalogRunner, MongoCatalogStore

from .conftest import CatalogBackend
from .support import AGENT_YAML, SKILL_MD, mongodb_mode


async def _last_seq(bus: Bus) -> int:
    return (await bus.js.stream_info(CATALOG)).state.last_seq


def _revisions(history: list[tuple[int, bool, Any]]) -> list[tuple[int, bool]]:
    return [(rev, deleted) for rev, deleted, _ in history]


# -- the shared suite: every test runs on PostgreSQL and on MongoDB --------------------------


async def test_apply_update_delete_keeps_history(bus: Bus, catalog_backend: CatalogBackend):
    store = catalog_backend.store
    async with catalog_backend.make_runner() as runner:
        await apply_agent(bus, AGENT_YAML, applied_by="ops")
        await apply_agent(bus, AGENT_YAML)  # unchanged: no new revision
        await apply_agent(bus, AGENT_YAML.replace("You implement", "You build"))
        await runner.wait_until(CATALOG, await _last_seq(bus))
        stored = await store.get_agent("implementer")
        assert stored is not None
        assert stored.revision == 2
        assert stored.updated_at is not None
        assert stored.definition.system_prompt == "You build tasks."
        assert [a.definition.id for a in await store.list_agents()] == ["implementer"]

        await delete_agent(bus, "implementer", deleted_by="ops")
        await runner.wait_until(CATALOG, await _last_seq(bus))
        assert await store.get_agent("implementer") is None
        assert await store.list_agents() == []
        history = await store.agent_history("implementer")
        assert _revisions(history) == [(1, False), (2, False), (3, True)]
        assert history[0][2].system_prompt == "You implement tasks."
        assert history[2][2] is None

        await apply_agent(bus, AGENT_YAML)  # back again, as revision 4
        await runner.wait_until(CATALOG, await _last_seq(bus))
        stored = await store.get_agent("implementer")
        assert stored is not None
        assert stored.revision == 4


async def test_agent_revisions_stay_readable_after_update_and_delete(
    bus: Bus, catalog_backend: CatalogBackend
):
    store = catalog_backend.store
    async with catalog_backend.make_runner() as runner:
        await apply_agent(bus, AGENT_YAML)
        await apply_agent(bus, AGENT_YAML.replace("You implement", "You build"))
        await delete_agent(bus, "implementer")
        await runner.wait_until(CATALOG, await _last_seq(bus))
    assert await store.get_agent("implementer") is None
    first = await store.get_agent("implementer", 1)
    second = await store.get_agent("implementer", 2)
    assert first is not None
    assert second is not None
    assert (first.revision, first.definition.system_prompt) == (1, "You implement tasks.")
    assert (second.revision, second.definition.system_prompt) == (2, "You build tasks.")
    assert first.updated_at is not None
    assert await store.get_agent("implementer", 3) is None  # the delete has no definition
    assert await store.get_agent("implementer", 4) is None
    assert await store.get_agent("ghost", 1) is None


async def test_reapply_is_idempotent(bus: Bus, catalog_backend: CatalogBackend):
    store = catalog_backend.store
    async with catalog_backend.make_runner() as runner:
        for _ in range(3):
            await apply_agent(bus, AGENT_YAML)
            await apply_skill(bus, SKILL_MD)
        await delete_agent(bus, "ghost")  # never applied: nothing to record
        await delete_skill(bus, "python")
        await delete_skill(bus, "python")  # already deleted: no new revision
        await runner.wait_until(CATALOG, await _last_seq(bus))
    assert _revisions(await store.agent_history("implementer")) == [(1, False)]
    assert _revisions(await store.skill_history("python")) == [(1, False), (2, True)]
    assert await store.agent_history("ghost") == []
    assert await store.get_skill("python") is None


async def test_skill_versions_and_pins(bus: Bus, catalog_backend: CatalogBackend):
    store = catalog_backend.store
    async with catalog_backend.make_runner() as runner:
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
        await runner.wait_until(CATALOG, await _last_seq(bus))
        assert await store.get_skill("python", "2.0.0") is None  # deleted: no pin resolves

        await apply_skill(bus, SKILL_MD.replace("1.0.0", "3.0.0"))
        await runner.wait_until(CATALOG, await _last_seq(bus))
        # Versions from before the delete are gone for pins; history stays.
        assert await store.get_skill("python", "1.0.0") is None
        current = await store.get_skill("python", "3.0.0")
        assert current is not None
        assert current.revision == 4
        assert [s.skill.version for s in await store.list_skills()] == ["3.0.0"]
    history = await store.skill_history("python")
    assert [(rev, d, s.version if s else None) for rev, d, s in history] == [
        (1, False, "1.0.0"),
        (2, False, "2.0.0"),
        (3, True, None),
        (4, False, "3.0.0"),
    ]


async def test_definition_on_another_subject_is_skipped(bus: Bus, catalog_backend: CatalogBackend):
    store = catalog_backend.store
    async with catalog_backend.make_runner() as runner:
        wrong = subjects.catalog_event(CatalogKind.AGENT, "other", "applied")
        await bus.publish(wrong, AgentApplied(definition=parse_agent(AGENT_YAML)))
        await apply_agent(bus, AGENT_YAML)
        await runner.wait_until(CATALOG, await _last_seq(bus))
    assert await store.get_agent("other") is None
    assert await store.agent_history("other") == []
    assert _revisions(await store.agent_history("implementer")) == [(1, False)]


async def test_restart_resumes_without_double_revisions(bus: Bus, catalog_backend: CatalogBackend):
    store = catalog_backend.store
    async with catalog_backend.make_runner() as first:
        await apply_agent(bus, AGENT_YAML)
        await apply_skill(bus, SKILL_MD)
        await first.wait_until(CATALOG, await _last_seq(bus))
    # While core is down: a re-apply, a change and a delete.
    await apply_agent(bus, AGENT_YAML)
    await apply_agent(bus, AGENT_YAML.replace("You implement", "You build"))
    await delete_skill(bus, "python")
    async with catalog_backend.make_runner() as second:
        await second.wait_until(CATALOG, await _last_seq(bus))
        assert second.applied > 0
    async with catalog_backend.make_runner() as third:
        await third.wait_until(CATALOG, await _last_seq(bus))
        assert third.applied == 0  # resumed at the end: nothing applied twice
    assert _revisions(await store.agent_history("implementer")) == [(1, False), (2, False)]
    assert _revisions(await store.skill_history("python")) == [(1, False), (2, True)]
    stored = await store.get_agent("implementer")
    assert stored is not None
    assert (stored.revision, stored.definition.system_prompt) == (2, "You build tasks.")


# -- both backends on one stream hold the same catalog ----------------------------------------


@pytest.mark.parametrize("mongodb", [mongodb_mode()])
async def test_backends_store_the_same_catalog(
    bus: Bus, pg_pool: asyncpg.Pool[Any], mongo_db, mongodb
):
    pg, mongo = PgCatalogStore(pg_pool), MongoCatalogStore(mongo_db)
    pg_runner = ProjectionRunner(bus, pg_pool, CatalogProjection(), fetch_timeout=0.2)
    async with pg_runner, MongoCatalogRunner(bus, mongo, fetch_timeout=0.2) as mongo_runner:
        await apply_agent(bus, AGENT_YAML, applied_by="ops")
        await apply_agent(bus, AGENT_YAML.replace("id: implementer", "id: reviewer"))
        await apply_skill(bus, SKILL_MD)
        await apply_skill(bus, SKILL_MD.replace("1.0.0", "2.0.0"))
        await delete_agent(bus, "implementer")
        await apply_agent(bus, AGENT_YAML.replace("tasks", "things"))
        await apply_agent(bus, AGENT_YAML.replace("tasks", "things"))
        await delete_skill(bus, "python")
        await apply_skill(bus, SKILL_MD.replace("1.0.0", "3.0.0"))
        last = await _last_seq(bus)
        await pg_runner.wait_until(CATALOG, last)
        await mongo_runner.wait_until(CATALOG, last)

    async def snapshot(store: Any) -> Any:
        return (
            [(a.definition, a.revision) for a in await store.list_agents()],
            [(s.skill, s.revision) for s in await store.list_skills()],
            await store.agent_history("implementer"),
            await store.agent_history("reviewer"),
            await store.skill_history("python"),
            [await store.get_skill("python", v) is not None for v in ("1.0.0", "2.0.0", "3.0.0")],
        )

    expected = await snapshot(pg)
    assert await snapshot(mongo) == expected
    assert len(expected[2]) == 3  # implementer: applied, deleted, applied again
    assert expected[5] == [False, False, True]


# -- MongoDB only: idempotence keyed by stream sequence ----------------------------------------


class _FlakyUpdates:
    """A motor collection whose first `update_one` fails as if the server went away."""

    def __init__(self, collection: Any) -> None:
        self._collection = collection
        self.failed = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._collection, name)

    async def update_one(self, *args: Any, **kwargs: Any) -> Any:
        if not self.failed:
            self.failed += 1
            raise AutoReconnect("connection reset (test)")
        return await self._collection.update_one(*args, **kwargs)


@pytest.mark.parametrize("mongodb", [mongodb_mode()])
async def test_mongodb_replay_past_checkpoint_adds_no_revision(bus: Bus, mongo_db, mongodb):
    store = MongoCatalogStore(mongo_db)
    async with MongoCatalogRunner(bus, store, fetch_timeout=0.2) as runner:
        await apply_agent(bus, AGENT_YAML)
        await apply_agent(bus, AGENT_YAML.replace("tasks", "things"))
        await apply_skill(bus, SKILL_MD)
        await delete_agent(bus, "implementer")
        await runner.wait_until(CATALOG, await _last_seq(bus))
    before = (await store.agent_history("implementer"), await store.skill_history("python"))
    assert _revisions(before[0]) == [(1, False), (2, False), (3, True)]
    # A crash after the item writes but before the checkpoint write: the checkpoint lags.
    await store.checkpoints.update_one({"_id": CATALOG}, {"$set": {"last_seq": 0}})
    async with MongoCatalogRunner(bus, store, fetch_timeout=0.2) as again:
        await again.wait_until(CATALOG, await _last_seq(bus))
        assert again.applied == 0
    assert (await store.agent_history("implementer"), await store.skill_history("python")) == (
        before
    )


@pytest.mark.parametrize("mongodb", [mongodb_mode()])
async def test_mongodb_crash_between_history_and_item_write(bus: Bus, mongo_db, mongodb):
    store = MongoCatalogStore(mongo_db)
    async with MongoCatalogRunner(bus, store, fetch_timeout=0.2) as runner:
        await apply_agent(bus, AGENT_YAML)
        await runner.wait_until(CATALOG, await _last_seq(bus))
        flaky = _FlakyUpdates(store.agents)
        store.agents = flaky  # type: ignore[assignment]
        # The revision document is written, then the item update fails: MongoDB "went away".
        await apply_agent(bus, AGENT_YAML.replace("tasks", "things"))
        await runner.wait_until(CATALOG, await _last_seq(bus))
    assert flaky.failed == 1
    assert _revisions(await store.agent_history("implementer")) == [(1, False), (2, False)]
    stored = await store.get_agent("implementer")
    assert stored is not None
    assert (stored.revision, stored.definition.system_prompt) == (2, "You implement things.")


# -- PostgreSQL only ---------------------------------------------------------------------------


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


async def test_a_canary_naming_a_missing_deleted_or_own_revision_is_refused(
    bus: Bus, catalog_backend: CatalogBackend
):
    store = catalog_backend.store
    canary = "canary: {{revision: {}, share: 0.5}}\n"
    v2 = AGENT_YAML.replace("You implement", "You build")
    async with catalog_backend.make_runner() as runner:
        await apply_agent(bus, AGENT_YAML)
        await apply_agent(bus, AGENT_YAML + canary.format(9))  # no revision 9
        await apply_agent(bus, AGENT_YAML + canary.format(2))  # 2 would be itself
        await runner.wait_until(CATALOG, await _last_seq(bus))
        assert _revisions(await store.agent_history("implementer")) == [(1, False)]
        await delete_agent(bus, "implementer")
        await apply_agent(bus, v2)  # 3
        await apply_agent(bus, AGENT_YAML + canary.format(2))  # 2 is a delete
        await apply_agent(bus, AGENT_YAML + canary.format(3))  # 4, canary on 3
        await runner.wait_until(CATALOG, await _last_seq(bus))
        stored = await store.get_agent("implementer")
        assert stored is not None
        assert stored.revision == 4
        assert stored.definition.canary is not None
        assert stored.definition.canary.revision == 3
