"""The `remember` tool end to end: the fake model calls it in a real run, the real memory
service (started in-process on the test's NATS and PostgreSQL) records through its secret
guard, and search finds what the run learned."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
from nexus_events.contract import subjects
from nexus_events.contract.streams import DLQ, MEMORY, RUNS
from nexus_events.events import MemoryRecorded
from nexus_events.events.runs import RunCompleted, ToolCalled, ToolResult
from nexus_events.transport.bus import Bus, decode_msg
from nexus_memory.app import MemoryApp
from nexus_memory.embedding import WordLlamaEmbedder
from nexus_testing import dead_letters, eventually
from tests.fakes.openai_server import FakeOpenAI, Reply, ToolCall

from nexus_runner.app import execute_run
from nexus_runner.config import RunnerSettings
from nexus_runner.tools.memory import memory_id_for
from services.memory.tests.conftest import memory_settings
from services.memory.tests.support import applied, until_found
from services.memory.tests.unit.test_guard import KEYS

from .support import make_config, run_events

GITHUB_TOKEN = KEYS["github_token"]
TOOLS = ["read_file", "remember", "finish"]


@pytest.fixture(scope="module")
def embedder() -> WordLlamaEmbedder:
    return WordLlamaEmbedder()


@pytest.fixture
async def memory(bus: Bus, pg_dsn: str, embedder: WordLlamaEmbedder) -> AsyncIterator[MemoryApp]:
    app = MemoryApp(memory_settings(pg_dsn), bus=bus, embedder=embedder)
    await app.start()
    try:
        yield app
    finally:
        await app.stop()


def remember(call_id: str, **args: Any) -> Reply:
    return Reply(tool_calls=(ToolCall("remember", args, id=call_id),))


def finish() -> Reply:
    return Reply(tool_calls=(ToolCall("finish", {"summary": "done"}),))


async def results(bus: Bus, run_id: str) -> dict[str, ToolResult]:
    """The run's tool results by call id (a repeated call id keeps the last)."""
    return {e.call_id: e for e in await run_events(bus, run_id) if isinstance(e, ToolResult)}


async def recorded(bus: Bus) -> list[tuple[str, MemoryRecorded]]:
    """Every `recorded` event on NEXUS_MEMORY with its subject."""
    out = []
    async for msg in bus.replay_raw(MEMORY):
        event = decode_msg(msg).event
        if isinstance(event, MemoryRecorded):
            out.append((msg.subject, event))
    return out


def tool_messages(llm: FakeOpenAI) -> dict[str, str]:
    """What the model was told each call returned, by call id (from the last request)."""
    return {
        m["tool_call_id"]: m["content"]
        for m in llm.requests[-1]["messages"]
        if m.get("role") == "tool"
    }


async def test_remembered_memory_is_found_by_search_with_its_run(
    bus: Bus, runner_bus: Bus, settings: RunnerSettings, memory: MemoryApp
) -> None:
    fact = "The calc project runs its tests with python -m pytest -q from the repo root"
    script = [
        remember("call_fact", text=fact, tags=["testing"], key="test-command"),
        # The same call again (a retried turn): still one memory.
        remember("call_fact", text=fact, tags=["testing"], key="test-command"),
        remember("call_task", text="Ticket T-7 only fails on Python 3.11", scope="task"),
        finish(),
    ]
    async with FakeOpenAI(script) as llm:
        config = make_config(llm.base_url, tools=TOOLS, task_id="T-7")
        terminal = await execute_run(config, settings, runner_bus)
    assert isinstance(terminal, RunCompleted), terminal
    fact_id = memory_id_for(config.run_id, "call_fact")
    task_id = memory_id_for(config.run_id, "call_task")
    told = tool_messages(llm)
    assert told["call_fact"] == f"remembered as {fact_id} (scope agent-implementer)"
    assert told["call_task"] == f"remembered as {task_id} (scope task-T-7)"
    by_call = await results(bus, config.run_id)
    assert by_call["call_fact"].ok
    assert by_call["call_task"].ok

    await applied(memory)
    items = await until_found(bus, "how do I run the calc tests", ["agent:implementer"], fact_id)
    item = next(i for i in items if i["memory_id"] == fact_id)
    assert item["source_run_id"] == config.run_id
    assert item["text"] == fact
    assert item["kind"] == "fact"
    task_items = await until_found(bus, "Python 3.11 failure", ["task:T-7"], task_id)
    assert {i["memory_id"] for i in task_items} == {task_id}

    events = [e for _, e in await recorded(bus)]
    assert sorted(e.memory_id for e in events) == sorted([fact_id, task_id])
    assert {e.source for e in events} == {"tool"}
    assert {e.source_run_id for e in events} == {config.run_id}
    fact_event = next(e for e in events if e.memory_id == fact_id)
    assert fact_event.key == "test-command"
    assert fact_event.tags == ["testing"]


async def test_a_scope_outside_the_run_is_refused_and_nothing_recorded(
    bus: Bus, runner_bus: Bus, settings: RunnerSettings, memory: MemoryApp
) -> None:
    script = [
        remember("call_other_agent", text="Reviewers must approve twice", scope="agent:reviewer"),
        remember("call_other_task", text="T-8 is done", scope="task:T-8"),
        remember("call_other_repo", text="Uses tabs", scope="repo:github.com/acme/other"),
        remember("call_mine", text="Reviews of calc are quick", scope="agent:implementer"),
        finish(),
    ]
    async with FakeOpenAI(script) as llm:
        config = make_config(llm.base_url, tools=TOOLS, task_id="T-7")
        terminal = await execute_run(config, settings, runner_bus)
    assert isinstance(terminal, RunCompleted), terminal
    told = tool_messages(llm)
    calls = {
        e.call_id: e for e in await run_events(bus, config.run_id) if isinstance(e, ToolCalled)
    }
    by_call = await results(bus, config.run_id)
    for refused in ("call_other_agent", "call_other_task", "call_other_repo"):
        assert calls[refused].refused, refused
        assert "outside this run" in (calls[refused].refusal_reason or "")
        assert not by_call[refused].ok
        assert told[refused].startswith("refused: scope ")
        assert "outside this run" in told[refused]
    mine = memory_id_for(config.run_id, "call_mine")
    assert by_call["call_mine"].ok
    # Only the run's own scope got an event; the others' subjects hold nothing.
    stored = await recorded(bus)
    assert [(s, e.memory_id) for s, e in stored] == [
        (subjects.memory_event("agent-implementer", "recorded"), mine)
    ]


async def test_a_secret_is_blocked_stored_nowhere_and_the_model_told(
    bus: Bus, runner_bus: Bus, settings: RunnerSettings, memory: MemoryApp
) -> None:
    script = [
        remember("call_secret", text=f"push with the token {GITHUB_TOKEN}", kind="decision"),
        finish(),
    ]
    async with FakeOpenAI(script) as llm:
        config = make_config(llm.base_url, tools=TOOLS)
        terminal = await execute_run(config, settings, runner_bus)
    assert isinstance(terminal, RunCompleted), terminal
    told = tool_messages(llm)["call_secret"]
    assert told.startswith("not remembered: blocked: the memory contains a secret")
    assert "github_token" in told
    assert "nothing was stored" in told
    assert not (await results(bus, config.run_id))["call_secret"].ok
    letters = await eventually(lambda: dead_letters(bus), what="dead letter of the blocked write")
    assert [letter.reason for letter in letters] == ["secret_blocked"]
    assert await recorded(bus) == []
    for stream in (RUNS, MEMORY, DLQ):
        raw = [m.data async for m in bus.replay_raw(stream)]
        assert not any(GITHUB_TOKEN.encode() in data for data in raw), stream


async def test_memory_down_is_a_tool_error_and_the_run_completes(
    bus: Bus, runner_bus: Bus, settings: RunnerSettings
) -> None:
    script = [remember("call_1", text="The build needs Java 21"), finish()]
    async with FakeOpenAI(script) as llm:
        config = make_config(llm.base_url, tools=TOOLS)
        terminal = await execute_run(config, settings, runner_bus)
    assert isinstance(terminal, RunCompleted), terminal
    told = tool_messages(llm)["call_1"]
    assert told == "memory is unavailable (no memory service answers); nothing was recorded"
    assert not (await results(bus, config.run_id))["call_1"].ok


async def test_a_silent_memory_service_is_waited_for_a_bounded_time(
    bus: Bus, runner_bus: Bus, settings: RunnerSettings
) -> None:
    asked = asyncio.Event()

    async def silent(msg: Any) -> None:  # takes the request, never answers
        asked.set()

    sub = await bus.nc.subscribe(subjects.MEMORY_RECORD, cb=silent)
    try:
        script = [remember("call_1", text="The build needs Java 21"), finish()]
        async with FakeOpenAI(script) as llm:
            config = make_config(llm.base_url, tools=TOOLS)
            fast = settings.model_copy(update={"remember_timeout": 0.5})
            terminal = await execute_run(config, fast, runner_bus)
    finally:
        await sub.unsubscribe()
    assert asked.is_set()
    assert isinstance(terminal, RunCompleted), terminal
    told = tool_messages(llm)["call_1"]
    assert told == "memory is unavailable (no answer within 0.5s); it may not have been recorded"


async def test_remember_is_not_offered_unless_granted(
    bus: Bus, runner_bus: Bus, settings: RunnerSettings, memory: MemoryApp
) -> None:
    script = [remember("call_1", text="Sneaky memory"), finish()]
    async with FakeOpenAI(script) as llm:
        config = make_config(llm.base_url, tools=["read_file", "finish"])
        terminal = await execute_run(config, settings, runner_bus)
    assert isinstance(terminal, RunCompleted), terminal
    offered = {t["function"]["name"] for t in llm.requests[0]["tools"]}
    assert offered == {"read_file", "finish"}
    assert "tool 'remember' is not granted" in tool_messages(llm)["call_1"]
    assert await recorded(bus) == []
