"""A sandboxed tool's capability token that does not parse is never a grant: `agents apply`
refuses the document, and a hand-published definition holding one is dead-lettered, not
stored; a valid one is stored and assembled into the run's config (the agent's, then its
skills')."""

from __future__ import annotations

import json
from typing import Any

import asyncpg
import pytest
import yaml
from nexus_events.contract import subjects
from nexus_events.contract.documents import parse_agent
from nexus_events.contract.streams import CATALOG
from nexus_events.contract.subjects import CatalogKind
from nexus_events.errors import DocumentInvalid
from nexus_events.events import MemoryContext, RunRequested, SkillDefinition
from nexus_events.transport.bus import Bus
from nexus_events.transport.catalog_commands import apply_agent
from nexus_events.transport.projection import ProjectionRunner
from nexus_testing import dead_letters

from nexus_core.assembly import assemble
from nexus_core.catalog_store import CatalogProjection, PgCatalogStore, StoredAgent, StoredSkill

from .support import AGENT_YAML, eventually

TOOL = {"name": "count", "description": "counts", "source": "async function run() {}"}


def _agent(*tokens: str) -> str:
    doc = yaml.safe_load(AGENT_YAML)
    doc["sandbox_tools"] = [{**TOOL, "capabilities": list(tokens)}]
    return json.dumps(doc)


async def test_a_bad_token_is_refused_at_apply_and_dead_lettered_by_hand(
    bus: Bus, pg_pool: asyncpg.Pool[Any]
) -> None:
    with pytest.raises(DocumentInvalid) as info:
        await apply_agent(bus, _agent("workspace:read:*", "workspace:exec:*"))
    assert [(e.loc, "'workspace:exec:*'" in e.msg) for e in info.value.errors] == [
        ("sandbox_tools.0.capabilities", True)
    ]
    assert (await bus.js.stream_info(CATALOG)).state.last_seq == 0

    store = PgCatalogStore(pg_pool)
    async with ProjectionRunner(bus, pg_pool, CatalogProjection(), fetch_timeout=0.2) as runner:
        ack = await bus.js.publish(
            subjects.catalog_event(CatalogKind.AGENT, "implementer", "applied"),
            json.dumps({"definition": json.loads(_agent("net:*"))}).encode(),
        )
        await apply_agent(bus, _agent("workspace:read:src/*", "state:write:n"))
        await runner.wait_until(CATALOG, (await bus.js.stream_info(CATALOG)).state.last_seq)

    async def letters() -> list[str]:
        return [
            f"{x.reason}: {x.error}"
            for x in await dead_letters(bus)
            if x.stream == CATALOG and x.stream_seq == ack.seq
        ]

    got = await eventually(letters, until=lambda v: len(v) == 1)
    assert "net:*" in got[0], got
    stored = await store.get_agent("implementer")
    assert stored is not None
    assert stored.revision == 1
    assert stored.definition.sandbox_tools[0].capabilities == [
        "workspace:read:src/*",
        "state:write:n",
    ]


def test_assembly_copies_the_agents_then_its_skills_sandboxed_tools() -> None:
    agent = parse_agent(_agent("state:read:*"))
    skill = SkillDefinition(
        name="python",
        version="1.0.0",
        content="c",
        sandbox_tools=[{**TOOL, "description": "the skill's"}, {**TOOL, "name": "other"}],  # type: ignore[list-item]
    )
    config = assemble(
        "run-1",
        RunRequested(agent_id="implementer", input="x"),
        StoredAgent(agent, 1, None),
        {"python": StoredSkill(skill, 1, None)},
        MemoryContext(),
    )
    assert not hasattr(config, "reason")
    tools = config.sandbox_tools  # type: ignore[union-attr]
    assert [(t.name, t.description) for t in tools] == [("count", "counts"), ("other", "counts")]
