"""The tables are a projection: a rebuild gives identical rows; a new embedder re-embeds by
replay; a service killed mid-ingest catches up to the same rows as an uninterrupted one."""

from __future__ import annotations

import asyncio
import os
import signal
import sys

import asyncpg
from nexus_events.contract import subjects
from nexus_events.events import MemoryRecorded
from nexus_events.transport.bus import Bus
from nexus_testing import eventually, free_port, http_status

from nexus_memory.app import MemoryApp
from nexus_memory.embedding import WordLlamaEmbedder
from services.memory.tests.conftest import MakeApp
from services.memory.tests.support import applied, ask, record, rows, search, until_found

TABLES = ("memory.memories", "memory.extractions", "memory.consolidations")


async def history(bus: Bus) -> dict[str, str]:
    """Memories with every kind of change: supersede, key, forget, access, consolidation."""
    ids = {
        "a": await record(bus, "Builds use make build", "agent:impl", key="build"),
        "b": await record(bus, "Tests run with pytest", "agent:impl"),
        "c": await record(bus, "Tests run with pytest", "agent:impl"),  # duplicate of b
        "d": await record(bus, "Lint with ruff check", "global"),
    }
    ids["e"] = await record(bus, "Builds use make all", "agent:impl", key="build")
    ids["f"] = await record(bus, "Lint with ruff and mypy", "global", supersedes=[ids["d"]])
    ids["g"] = await record(bus, "Lint with ruff and  MyPy", "global")  # duplicate of f
    forgotten = await ask(bus, subjects.MEMORY_FORGET, {"memory_id": ids["b"]})
    assert forgotten == {"memory_id": ids["b"], "scope": "agent-impl"}, forgotten
    await search(bus, "how to build", ["agent:impl"])
    return ids


async def test_rebuild_gives_identical_rows(
    memory: MemoryApp, bus: Bus, pg_pool: asyncpg.Pool
) -> None:
    ids = await history(bus)
    await until_found(bus, "lint", ["global"], ids["g"])
    await applied(memory)
    consolidated = await ask(bus, subjects.MEMORY_CONSOLIDATE, {})
    # g repeats f; c repeats b, but b is forgotten, so c is the live one.
    assert consolidated["superseded"] == 1
    assert memory.tracker is not None
    await memory.tracker.flush()
    await applied(memory)
    before = {t: await rows(pg_pool, t) for t in TABLES}
    assert len(before["memory.memories"]) == 7
    live = {r["memory_id"] for r in before["memory.memories"] if r["valid_to"] is None}
    assert live == {ids["c"], ids["e"], ids["f"]}
    assert len(before["memory.consolidations"]) == 2
    reply = await ask(bus, subjects.MEMORY_REBUILD, {}, wait=30)
    assert reply["applied"] >= 9
    assert reply["dimension"] == 256
    after = {t: await rows(pg_pool, t) for t in TABLES}
    assert after == before


async def test_another_embedder_reembeds_by_replay(
    make_memory: MakeApp, bus: Bus, pg_pool: asyncpg.Pool
) -> None:
    first = await make_memory()
    mid = await record(bus, "Releases are tagged vX.Y.Z", "global")
    await until_found(bus, "release tags", ["global"], mid)
    await first.stop()
    small = WordLlamaEmbedder(dimension=64)
    second = MemoryApp(first.settings, bus=bus, embedder=small)
    await second.start()
    try:
        name = await pg_pool.fetchval("SELECT name FROM memory.embedder")
        assert name == "wordllama:l2_supercat:64"
        dims = await pg_pool.fetchval("SELECT vector_dims(embedding) FROM memory.memories")
        assert dims == 64
        items = await search(bus, "release tags", ["global"])
        assert [i["memory_id"] for i in items] == [mid]
    finally:
        await second.stop()


async def test_killed_mid_ingest_catches_up_to_the_same_rows(
    bus: Bus, nats_url: str, pg_dsn: str, pg_pool: asyncpg.Pool, make_memory: MakeApp
) -> None:
    n = 3000
    for start in range(0, n, 500):
        await asyncio.gather(*(
            bus.publish(
                subjects.memory_event(f"agent-a{i % 7}", "recorded"),
                MemoryRecorded(memory_id=f"mem-{i}", text=f"fact number {i} about module m{i % 50}",
                               key=f"k{i % 400}"),
            )
            for i in range(start, min(start + 500, n))
        ))  # fmt: skip
    port = free_port()
    env = {
        **os.environ, "NEXUS_NATS_URL": nats_url, "NEXUS_DATABASE_URL": pg_dsn,
        "NEXUS_HEALTH_PORT": str(port), "NEXUS_FETCH_TIMEOUT": "0.2",
        "NEXUS_PROJECTION_BATCH": "100", "NEXUS_MEMORY_EXTRACTION": "false",
        "NEXUS_MEMORY_CONSOLIDATION_INTERVAL": "0", "OTEL_SDK_DISABLED": "true",
    }  # fmt: skip

    async def spawn() -> asyncio.subprocess.Process:
        return await asyncio.create_subprocess_exec(sys.executable, "-m", "nexus_memory", env=env)

    async def projected() -> int:
        try:
            return int(await pg_pool.fetchval("SELECT count(*) FROM memory.memories"))
        except asyncpg.exceptions.UndefinedTableError:
            return 0

    proc = await spawn()
    try:
        await eventually(lambda: _between(projected, 200, n - 200), within=60, what="mid-ingest")
        proc.send_signal(signal.SIGKILL)
        await proc.wait()
        proc = await spawn()
        await eventually(
            lambda: http_status(port, "/readyz"), lambda s: s == 200, within=60, what="restarted"
        )
        await eventually(lambda: _between(projected, n, n), within=60, what="caught up")
        proc.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(proc.wait(), 30) == 0
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    interrupted = await rows(pg_pool)
    app = await make_memory()
    await app.rebuild()
    assert await rows(pg_pool) == interrupted
    # One live memory per (scope, key): a newer one with the same key superseded the rest.
    live = len({(i % 7, i % 400) for i in range(n)})
    assert sum(1 for r in interrupted if r["valid_to"] is None) == live


async def _between(count: object, low: int, high: int) -> bool:
    value = await count()  # type: ignore[operator]
    return bool(low <= value <= high)
