"""No secret reaches a stream, a table or a log, whichever way it comes in."""

from __future__ import annotations

import json
import logging

import asyncpg
import pytest
from nexus_events.contract import subjects
from nexus_events.contract.streams import DLQ, MEMORY
from nexus_events.events import MemoryRecorded
from nexus_events.transport.bus import Bus
from nexus_testing import dead_letters, eventually

from nexus_memory.app import MemoryApp
from services.memory.tests.conftest import MakeApp
from services.memory.tests.support import applied, ask, record, until_found
from services.memory.tests.unit.test_guard import KEYS

OPENAI = KEYS["openai_api_key"]
AWS = KEYS["aws_access_key"]


async def stream_text(bus: Bus, stream: str) -> str:
    return "\n".join([m.data.decode(errors="replace") async for m in bus.replay_raw(stream)])


async def test_blocked_write_is_refused_dead_lettered_and_stored_nowhere(
    memory: MemoryApp, bus: Bus, pg_pool: asyncpg.Pool, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    reply = await bus.nc.request(
        subjects.MEMORY_RECORD,
        json.dumps({"text": f"the deploy key is {OPENAI}", "scope": "agent:ops"}).encode(),
        timeout=5,
    )
    assert reply.headers is not None
    assert reply.headers["Nats-Service-Error-Code"] == "422"
    assert "openai_api_key" in json.loads(reply.data)["error"]["message"]
    letters = await eventually(lambda: dead_letters(bus), what="dead letter")
    assert letters[0].reason == "secret_blocked"
    assert "openai_api_key" in letters[0].error
    kept = await record(bus, "deploys need the ops VPN", "agent:ops")
    await applied(memory)
    assert [
        r["memory_id"] for r in await pg_pool.fetch("SELECT memory_id FROM memory.memories")
    ] == [kept]
    for stream in (MEMORY, DLQ):
        assert OPENAI not in await stream_text(bus, stream)
    assert OPENAI not in caplog.text


async def test_redact_policy_stores_the_rest_of_the_text(
    make_memory: MakeApp, bus: Bus, pg_pool: asyncpg.Pool
) -> None:
    memory = await make_memory(memory_secret_policy="redact")
    reply = await ask(
        bus,
        subjects.MEMORY_RECORD,
        {"text": f"AWS key {AWS} belongs to the billing job", "scope": "global", "tags": [OPENAI]},
    )
    assert reply["redacted"] is True
    assert set(reply["findings"]) == {"aws_access_key", "openai_api_key"}
    items = await until_found(bus, "billing job key", ["global"], reply["memory_id"])
    assert items[0]["text"] == "AWS key [REDACTED:aws_access_key] belongs to the billing job"
    await applied(memory)
    row = await pg_pool.fetchrow("SELECT tags, redacted FROM memory.memories")
    assert row["redacted"] is True
    assert row["tags"] == ["[REDACTED:openai_api_key]"]
    text = await stream_text(bus, MEMORY)
    assert AWS not in text
    assert OPENAI not in text


async def test_a_secret_published_by_hand_is_erased_from_the_stream(
    memory: MemoryApp, bus: Bus, pg_pool: asyncpg.Pool, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    leaked = MemoryRecorded(memory_id="mem-leak", text=f"token {KEYS['github_token']}")
    ack = await bus.publish(subjects.memory_event("global", "recorded"), leaked)
    clean = await record(bus, "the nightly job runs at 02:00", "global")
    await applied(memory)

    async def erased() -> bool:
        info = await bus.js.stream_info(MEMORY)
        return ack.seq in (info.state.deleted or [])

    async def erased_by_count() -> bool:
        return (await bus.js.stream_info(MEMORY)).state.messages == 1

    await eventually(erased_by_count, what="leaked event erased")
    assert KEYS["github_token"] not in await stream_text(bus, MEMORY)
    letters = await eventually(lambda: dead_letters(bus), what="dead letter")
    assert (letters[0].stream, letters[0].stream_seq) == (MEMORY, ack.seq)
    assert letters[0].reason == "secret_blocked"
    assert KEYS["github_token"] not in await stream_text(bus, DLQ)
    ids = [r["memory_id"] for r in await pg_pool.fetch("SELECT memory_id FROM memory.memories")]
    assert ids == [clean]
    assert KEYS["github_token"] not in caplog.text
