"""Invalid memory events are dead-lettered with the reason and the service keeps going."""

from __future__ import annotations

import asyncpg
from nexus_events.contract import subjects
from nexus_events.transport.bus import Bus
from nexus_testing import dead_letters, eventually

from nexus_memory.app import MemoryApp
from services.memory.tests.support import applied, record, until_found


async def test_invalid_events_are_dead_lettered_and_the_service_goes_on(
    memory: MemoryApp, bus: Bus, pg_pool: asyncpg.Pool
) -> None:
    await bus.js.publish(subjects.memory_event("global", "recorded"), b"{not json")
    await bus.js.publish(subjects.memory_event("global", "recorded"), b'{"memory_id": "m"}')
    await bus.js.publish(subjects.memory_event("global", "exploded"), b"{}")
    await bus.js.publish("nexus.memory.v1.global.recorded", b'{"memory_id": "m2", "text": "ok"}')
    mid = await record(bus, "after the poison, memory still works", "global")
    await until_found(bus, "memory still works", ["global"], mid)
    await applied(memory)

    async def three() -> list:
        letters = [
            letter
            for letter in await dead_letters(bus)
            if letter.consumer and "memory" in letter.consumer
        ]
        return letters if len(letters) >= 3 else []

    letters = await eventually(three, what="three dead letters from the projection")
    assert {letter.reason for letter in letters} >= {
        "undecodable",
        "invalid_event",
        "unknown_event",
    }
    ids = {r["memory_id"] for r in await pg_pool.fetch("SELECT memory_id FROM memory.memories")}
    assert ids == {"m2", mid}
    assert memory.ready()
