"""Flow definitions in core's catalog: every revision kept on both backends (PostgreSQL and
MongoDB through `catalog_backend`), served by `catalog.flows.list|get`, and a definition that
breaks the contract, published by hand, dead-lettered with the reason while the rest goes on."""

from __future__ import annotations

import json
from typing import Any

import asyncpg
import pytest
import yaml
from nexus_events.contract import subjects
from nexus_events.contract.documents import parse_flow
from nexus_events.contract.streams import CATALOG
from nexus_events.contract.subjects import CatalogKind
from nexus_events.events import FlowApplied
from nexus_events.transport.bus import Bus
from nexus_events.transport.catalog_commands import apply_agent, apply_flow, delete_flow
from nexus_events.transport.projection import ProjectionRunner
from nexus_testing import dead_letters

from nexus_core.app import CoreApp
from nexus_core.catalog_store import CatalogProjection, PgCatalogStore
from nexus_core.mongo_catalog import MongoCatalogRunner, MongoCatalogStore

from .conftest import CatalogBackend
from .support import AGENT_YAML, catalog_ready, eventually, mongodb_mode, query

FLOW_YAML = """
id: review
description: Implement, then review until approved.
steps:
  - id: implement
    kind: run
    agent: implementer
    input: "Do it: {{ input }}"
    max_rounds: 3
  - id: review
    kind: run
    agent: implementer
    next:
      - when: review.verdict == "request_changes"
        to: implement
"""
CHANGED = FLOW_YAML.replace("max_rounds: 3", "max_rounds: 5")


async def _last_seq(bus: Bus) -> int:
    return (await bus.js.stream_info(CATALOG)).state.last_seq


async def test_flow_revisions_get_list_delete(bus: Bus, catalog_backend: CatalogBackend):
    store = catalog_backend.store
    async with catalog_backend.make_runner() as runner:
        await apply_flow(bus, FLOW_YAML, applied_by="ops")
        await apply_flow(bus, FLOW_YAML)  # unchanged: no new revision
        await apply_flow(bus, CHANGED)
        await runner.wait_until(CATALOG, await _last_seq(bus))
        latest = await store.get_flow("review")
        assert latest is not None
        assert (latest.revision, latest.definition.step("implement").max_rounds) == (2, 5)
        assert latest.updated_at is not None
        first = await store.get_flow("review", 1)
        assert first is not None
        assert (first.revision, first.definition.step("implement").max_rounds) == (1, 3)
        assert await store.get_flow("review", 9) is None
        assert [(f.definition.id, f.revision) for f in await store.list_flows()] == [("review", 2)]

        await delete_flow(bus, "review", deleted_by="ops")
        await delete_flow(bus, "review")  # already deleted: no new revision
        await runner.wait_until(CATALOG, await _last_seq(bus))
        assert await store.get_flow("review") is None
        assert await store.list_flows() == []
        # A run pinned to revision 2 can still read it; the delete itself is no definition.
        pinned = await store.get_flow("review", 2)
        assert pinned is not None
        assert pinned.definition.step("implement").max_rounds == 5
        assert await store.get_flow("review", 3) is None
        history = await store.flow_history("review")
        assert [(rev, deleted) for rev, deleted, _ in history] == [
            (1, False),
            (2, False),
            (3, True),
        ]
        assert history[2][2] is None

        await apply_flow(bus, FLOW_YAML)  # back again, as revision 4
        await runner.wait_until(CATALOG, await _last_seq(bus))
        again = await store.get_flow("review")
        assert again is not None
        assert again.revision == 4


def _raw_flow(**step_changes: Any) -> dict[str, Any]:
    definition = yaml.safe_load(FLOW_YAML)
    definition["steps"][1].update(step_changes)
    return definition


async def test_invalid_flow_published_by_hand_is_dead_lettered(
    bus: Bus, catalog_backend: CatalogBackend
):
    store = catalog_backend.store
    bad_expression = _raw_flow(next=[{"when": "review.verdict ==", "to": "implement"}])
    unbounded = yaml.safe_load(FLOW_YAML.replace("    max_rounds: 3\n", ""))
    async with catalog_backend.make_runner() as runner:
        seqs = {}
        for name, definition in (("expr", bad_expression), ("loop", unbounded)):
            definition["id"] = f"bad-{name}"
            ack = await bus.js.publish(
                subjects.catalog_event(CatalogKind.FLOW, f"bad-{name}", "applied"),
                json.dumps({"definition": definition}).encode(),
            )
            seqs[ack.seq] = name
        # Valid, but on another flow's subject: skipped (as an agent's would be), not stored.
        await bus.publish(
            subjects.catalog_event(CatalogKind.FLOW, "elsewhere", "applied"),
            FlowApplied(definition=parse_flow(FLOW_YAML)),
        )
        await apply_flow(bus, FLOW_YAML)  # a valid one after them still lands
        await runner.wait_until(CATALOG, await _last_seq(bus))
        stored = await store.get_flow("review")
        assert stored is not None
        assert stored.revision == 1

    async def letters() -> dict[str, str]:
        found = {x.stream_seq: x for x in await dead_letters(bus) if x.stream == CATALOG}
        return {seqs[s]: f"{x.reason}: {x.error}" for s, x in found.items() if s in seqs}

    got = await eventually(letters, until=lambda v: len(v) == 2)
    assert "does not parse" in got["expr"], got
    assert "a loop without max_rounds" in got["loop"], got
    assert await store.flow_history("bad-expr") == []
    assert await store.flow_history("bad-loop") == []
    assert await store.flow_history("elsewhere") == []


async def test_core_serves_flows_list_and_get(bus: Bus, core: CoreApp):
    await apply_agent(bus, AGENT_YAML)
    await apply_flow(bus, FLOW_YAML)
    await apply_flow(bus, CHANGED)
    await catalog_ready(core)

    error, listed = await query(bus, subjects.CORE_CATALOG_FLOWS_LIST)
    assert error is None
    assert [(f["definition"]["id"], f["revision"]) for f in listed["flows"]] == [("review", 2)]

    error, latest = await query(bus, subjects.CORE_CATALOG_FLOWS_GET, {"id": "review"})
    assert error is None
    assert latest["revision"] == 2
    assert latest["definition"]["steps"][0]["max_rounds"] == 5
    error, pinned = await query(
        bus, subjects.CORE_CATALOG_FLOWS_GET, {"id": "review", "revision": 1}
    )
    assert error is None
    assert (pinned["revision"], pinned["definition"]["steps"][0]["max_rounds"]) == (1, 3)

    # Not found answers exactly as agents.get does: 404 and the same error body shape.
    agent_error, agent_missing = await query(
        bus, subjects.CORE_CATALOG_AGENTS_GET, {"id": "nobody"}
    )
    error, missing = await query(bus, subjects.CORE_CATALOG_FLOWS_GET, {"id": "nothing"})
    assert (error, agent_error) == ("404", "404")
    assert set(missing["error"]) == set(agent_missing["error"])
    assert "no flow 'nothing'" in missing["error"]["message"]
    error, missing = await query(
        bus, subjects.CORE_CATALOG_FLOWS_GET, {"id": "review", "revision": 7}
    )
    assert error == "404"
    assert "review@7" in missing["error"]["message"]
    # Past PostgreSQL's int4 revision column but within the query's bigint: not found either.
    error, _ = await query(
        bus, subjects.CORE_CATALOG_FLOWS_GET, {"id": "review", "revision": 2**63 - 1}
    )
    assert error == "404"
    error, bad = await query(bus, subjects.CORE_CATALOG_FLOWS_GET, {"id": "review", "revision": 0})
    assert error == "400"
    assert bad["error"]["fields"][0]["loc"] == "revision"


@pytest.mark.parametrize("mongodb", [mongodb_mode()])
async def test_backends_store_the_same_flows(
    bus: Bus, pg_pool: asyncpg.Pool[Any], mongo_db: Any, mongodb: str
):
    pg, mongo = PgCatalogStore(pg_pool), MongoCatalogStore(mongo_db)
    pg_runner = ProjectionRunner(bus, pg_pool, CatalogProjection(), fetch_timeout=0.2)
    async with pg_runner, MongoCatalogRunner(bus, mongo, fetch_timeout=0.2) as mongo_runner:
        await apply_flow(bus, FLOW_YAML, applied_by="ops")
        await apply_flow(bus, FLOW_YAML.replace("id: review", "id: other"))
        await apply_flow(bus, CHANGED)
        await delete_flow(bus, "other")
        await apply_flow(bus, FLOW_YAML)
        last = await _last_seq(bus)
        await pg_runner.wait_until(CATALOG, last)
        await mongo_runner.wait_until(CATALOG, last)

    async def snapshot(store: Any) -> Any:
        return (
            [(f.definition, f.revision) for f in await store.list_flows()],
            await store.flow_history("review"),
            await store.flow_history("other"),
            [await store.get_flow("review", n) is not None for n in (1, 2, 3, 4)],
        )

    expected = await snapshot(pg)
    assert await snapshot(mongo) == expected
    assert [rev for _, rev in expected[0]] == [3]  # review: applied, changed, back again
    assert expected[3] == [True, True, True, False]
