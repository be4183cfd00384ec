"""Consolidation over real tables: duplicates merge into the older memory, a negation
supersedes what it contradicts, old unused memories go stale, and a second pass with nothing
new changes nothing."""

from __future__ import annotations

from datetime import datetime, timedelta

import asyncpg
from nexus_events.contract import subjects
from nexus_events.contract.streams import MEMORY
from nexus_events.transport.bus import Bus

from services.memory.tests.conftest import MakeApp
from services.memory.tests.support import applied, ask, record, search


async def test_a_pass_merges_supersedes_and_decays(
    make_memory: MakeApp, bus: Bus, pg_pool: asyncpg.Pool
) -> None:
    # The pass runs one decay age after `first` was recorded: `old`, recorded before it and
    # never returned by a search, is past the age; everything from `first` on is not.
    now: list[datetime] = []
    memory = await make_memory(memory_decay_days=7, clock=lambda: now[0])
    old = await record(bus, "Staging deploys happen on Fridays", "agent:ops")
    first = await record(bus, "Tests are run with pytest -x", "agent:impl")
    dup = await record(bus, "tests are run with   pytest -x", "agent:impl")
    near = await record(bus, "Tests run with pytest", "agent:impl")
    yes = await record(bus, "CI uses pytest", "agent:ci")
    no = await record(bus, "CI does not use pytest", "agent:ci")
    await applied(memory)
    recorded = "SELECT recorded_at FROM memory.memories WHERE memory_id = $1"
    now.append(await pg_pool.fetchval(recorded, first) + timedelta(days=7))
    assert await pg_pool.fetchval(recorded, old) < now[0] - timedelta(days=7)
    reply = await ask(bus, subjects.MEMORY_CONSOLIDATE, {})
    assert reply == {"scopes": 3, "superseded": 3, "stale": 1}
    await applied(memory)
    rows = {
        r["memory_id"]: (r["superseded_by"], r["supersede_reason"], r["stale"])
        for r in await pg_pool.fetch("SELECT * FROM memory.memories")
    }
    assert rows[dup] == (first, "duplicate", False)
    assert rows[near] == (first, "near_duplicate", False)
    assert rows[yes] == (no, "contradicted", False)
    assert rows[old] == (None, None, True)
    assert rows[first] == (None, None, False)
    assert [i["memory_id"] for i in await search(bus, "staging deploys", ["agent:ops"])] == []
    before = (await bus.js.stream_info(MEMORY)).state.last_seq
    again = await ask(bus, subjects.MEMORY_CONSOLIDATE, {"scopes": ["agent:impl", "agent:ci"]})
    assert again == {"scopes": 2, "superseded": 0, "stale": 0}
    assert (await bus.js.stream_info(MEMORY)).state.last_seq == before
