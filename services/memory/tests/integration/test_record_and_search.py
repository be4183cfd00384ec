"""Recording and searching over NATS against the real service, NATS and PostgreSQL."""

from __future__ import annotations

import json

import asyncpg
from nexus_events.contract import subjects
from nexus_events.events import MemoryRecorded
from nexus_events.transport.bus import Bus, Outgoing
from nexus_testing import eventually

from nexus_memory.app import MemoryApp
from services.memory.tests.support import applied, ask, record, search, until_found


async def test_recorded_memory_is_found_and_says_why(memory: MemoryApp, bus: Bus) -> None:
    mid = await record(bus, "The test suite runs with pytest -x from the repo root", "agent:impl")
    await record(bus, "Deploys go through the staging cluster first", "agent:impl")
    items = await until_found(bus, "how do I run the tests", ["agent:impl"], mid)
    top = items[0]
    assert top["memory_id"] == mid
    assert top["scope"] == "agent-impl"
    assert top["why"]["semantic_rank"] == 1
    assert top["why"]["lexical_rank"] == 1  # "tests" stems to "test"
    assert top["why"]["recency"] > 0.99
    assert [i["score"] for i in items] == sorted((i["score"] for i in items), reverse=True)


async def test_a_search_sees_only_the_scopes_it_names(memory: MemoryApp, bus: Bus) -> None:
    a = await record(bus, "Team A builds with make release", "agent:a")
    b = await record(bus, "Team B builds with make release too", "agent:b")
    g = await record(bus, "Every team builds with make", "global")
    await applied(memory)
    only_a = {i["memory_id"] for i in await search(bus, "how to build", ["agent:a"])}
    assert only_a == {a}
    both = {i["memory_id"] for i in await search(bus, "how to build", ["agent-a", "global"])}
    assert both == {a, g}
    assert b not in both


async def test_strict_search_hides_superseded_memories(memory: MemoryApp, bus: Bus) -> None:
    old = await record(bus, "Run the tests with nose", "repo:github.com/acme/app")
    keyed = await record(bus, "The test command is tox", "repo:github.com/acme/app", key="test-cmd")
    new = await record(
        bus, "Run the tests with pytest", "repo:github.com/acme/app", supersedes=[old]
    )
    newest = await record(
        bus, "The test command is make test", "repo:github.com/acme/app", key="test-cmd"
    )
    await applied(memory)
    scope = ["repo:github.com/acme/app"]
    strict = {i["memory_id"] for i in await search(bus, "run the tests", scope)}
    assert strict == {new, newest}
    loose = {i["memory_id"]: i for i in await search(bus, "run the tests", scope, strict=False)}
    assert set(loose) == {old, keyed, new, newest}
    assert loose[old]["current"] is False
    assert loose[keyed]["current"] is False
    assert loose[new]["current"] is True
    listed = await ask(bus, subjects.MEMORY_LIST, {"scopes": scope, "include_history": True})
    status = {i["memory_id"]: (i["status"], i["superseded_by"]) for i in listed["items"]}
    assert status[old] == ("superseded", new)
    assert status[keyed] == ("superseded", newest)


async def test_forget_right_after_record_finds_the_memory_not_yet_projected(
    memory: MemoryApp, bus: Bus, pg_pool: asyncpg.Pool
) -> None:
    """`add` then `forget` while the projection is behind: forget finds the memory in the
    stream instead of answering 404 (the race that made consolidation see a forgotten
    duplicate). The projection is held back for the whole exchange, not raced."""
    early = await record(bus, "Projected before the hold", "agent:burst")
    await applied(memory)
    await memory._step_down()  # the projection stops; the lease (and the endpoints) stay
    assert memory.runner is None
    ids = [f"mem-burst-{i}" for i in range(50)]
    await bus.publish_many([
        Outgoing(subjects.memory_event("agent-burst", "recorded"),
                 MemoryRecorded(memory_id=mid, text=f"burst fact {i} about module m{i}"))
        for i, mid in enumerate(ids)
    ])  # fmt: skip
    fresh = await record(bus, "Recorded while the projection is held", "repo:acme")
    projected = await pg_pool.fetchval(
        "SELECT count(*) FROM memory.memories WHERE memory_id = ANY($1::text[])", [*ids, fresh]
    )
    assert projected == 0  # held back: nothing of the burst is in the tables

    assert await ask(bus, subjects.MEMORY_FORGET, {"memory_id": ids[-1]}) == {
        "memory_id": ids[-1],
        "scope": "agent-burst",
    }
    assert await ask(bus, subjects.MEMORY_FORGET, {"memory_id": fresh, "reason": "wrong"}) == {
        "memory_id": fresh,
        "scope": "repo-acme",
    }
    assert await ask(bus, subjects.MEMORY_FORGET, {"memory_id": early}) == {
        "memory_id": early,
        "scope": "agent-burst",
    }
    missing = await ask(bus, subjects.MEMORY_FORGET, {"memory_id": "mem-never-recorded"})
    assert missing["error"]["code"] == 404

    await memory._lead()  # the projection resumes: each forget lands after its record
    await applied(memory)
    status = dict(
        await pg_pool.fetch(
            "SELECT memory_id, forgotten FROM memory.memories WHERE memory_id = ANY($1::text[])",
            [early, fresh, ids[0], ids[-1]],
        )
    )
    assert status == {early: True, fresh: True, ids[0]: False, ids[-1]: True}


async def test_forget_hides_a_memory_and_keeps_its_history(
    memory: MemoryApp, bus: Bus, pg_pool: asyncpg.Pool
) -> None:
    mid = await record(bus, "The staging password rotates monthly", "global")
    await until_found(bus, "staging password", ["global"], mid)
    reply = await ask(bus, subjects.MEMORY_FORGET, {"memory_id": mid, "reason": "outdated"})
    assert reply == {"memory_id": mid, "scope": "global"}

    async def gone() -> bool:
        return not await search(bus, "staging password", ["global"], strict=False)

    await eventually(gone, what="forgotten memory hidden")
    row = await pg_pool.fetchrow("SELECT * FROM memory.memories WHERE memory_id = $1", mid)
    assert row["forgotten"]
    assert row["forget_reason"] == "outdated"
    assert row["valid_to"] is not None


async def test_searches_count_accesses(memory: MemoryApp, bus: Bus, pg_pool: asyncpg.Pool) -> None:
    mid = await record(bus, "Use the blue-green deploy script", "agent:ops")
    await until_found(bus, "deploy", ["agent:ops"], mid)
    for _ in range(3):
        await search(bus, "deploy script", ["agent:ops"])

    async def counted() -> int:
        n = await pg_pool.fetchval(
            "SELECT access_count FROM memory.memories WHERE memory_id = $1", mid
        )
        return int(n) if n and n >= 4 else 0

    assert await eventually(counted, what="access count 4") >= 4
    items = await search(bus, "deploy script", ["agent:ops"])
    assert items[0]["why"]["access_count"] >= 4


async def test_bad_requests_get_structured_errors(memory: MemoryApp, bus: Bus) -> None:
    cases = [
        (subjects.MEMORY_SEARCH, {"query": "x"}, "400", "scopes"),
        (subjects.MEMORY_SEARCH, {"query": "x", "scopes": ["team:x"]}, "400", "scopes"),
        (subjects.MEMORY_RECORD, {"text": "x", "scope": "global", "colour": 1}, "400", "colour"),
        (subjects.MEMORY_RECORD, {"text": "", "scope": "global"}, "400", "text"),
        (subjects.MEMORY_FORGET, {"memory_id": "mem-nope"}, "404", "mem-nope"),
        (subjects.MEMORY_LIST, {"limit": 0}, "400", "limit"),
    ]
    for subject, body, code, word in cases:
        reply = await bus.nc.request(subject, json.dumps(body).encode(), timeout=5)
        assert reply.headers is not None, (subject, body)
        assert reply.headers["Nats-Service-Error-Code"] == code, (subject, body, reply.data)
        error = json.loads(reply.data)["error"]
        assert word in error["message"], error
    raw = await bus.nc.request(subjects.MEMORY_SEARCH, b"not json", timeout=5)
    assert raw.headers is not None
    assert raw.headers["Nats-Service-Error-Code"] == "400"
