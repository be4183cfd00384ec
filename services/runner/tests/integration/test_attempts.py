"""A later attempt of a run reads only the inbox messages and cancels meant for it."""

from __future__ import annotations

import asyncio
from pathlib import Path

from nexus_events.contract import subjects
from nexus_events.events.inbox import InboxMessage
from nexus_events.events.runs import (
    CancelRequested,
    RunCancelled,
    RunCompleted,
    RunConfig,
    RunDispatched,
)
from nexus_events.transport.bus import Bus
from tests.fakes.openai_server import FakeOpenAI, Reply, ToolCall

from nexus_runner.app import RunHandle, execute_run
from nexus_runner.config import RunnerSettings

from .support import make_config


def finish() -> Reply:
    return Reply(tool_calls=(ToolCall("finish", {"summary": "done"}),))


def attempt(config: RunConfig, number: int, base_url: str) -> RunConfig:
    model = config.model.model_copy(update={"base_url": base_url})
    return config.model_copy(update={"attempt": number, "model": model})


def fresh(settings: RunnerSettings, tmp_path: Path, name: str) -> RunnerSettings:
    return settings.model_copy(update={"workspace_root": tmp_path / name})


async def say(bus: Bus, run_id: str, text: str) -> None:
    await bus.publish(subjects.inbox(run_id), InboxMessage(text=text, sender="ann"))


async def run_until_message(
    config: RunConfig, settings: RunnerSettings, bus: Bus, llm: FakeOpenAI
) -> tuple[RunCompleted, list[str]]:
    """Run `config` (whose model hangs on its first reply) until the control channel has
    been given a message, then let it finish; the texts it was given, in order."""
    handle = RunHandle()
    run = asyncio.create_task(execute_run(config, settings, bus, handle=handle))
    await asyncio.wait_for(llm.hanging.wait(), 10)
    assert handle.control is not None
    await asyncio.wait_for(handle.control.message_arrived.wait(), 10)
    llm.release.set()
    terminal = await asyncio.wait_for(run, 10)
    assert isinstance(terminal, RunCompleted), terminal
    return terminal, [m.text for m in handle.control.received]


def sent_texts(llm: FakeOpenAI) -> str:
    return "\n".join(str(m.get("content")) for r in llm.requests for m in r["messages"])


async def test_second_attempt_does_not_reread_the_first_attempts_inbox(
    bus: Bus, runner_bus: Bus, settings: RunnerSettings, tmp_path: Path
) -> None:
    async with FakeOpenAI([Reply(text="working", hang=True), finish()]) as llm:
        config = make_config(llm.base_url)
        await say(bus, config.run_id, "first: fix calc")  # before the runner came up
        _, given = await run_until_message(config, fresh(settings, tmp_path, "a1"), runner_bus, llm)
    assert given == ["first: fix calc"]
    # Sent after attempt 1 ended, while the run waits for its retry: attempt 2's to read.
    await say(bus, config.run_id, "second: also update the docs")
    async with FakeOpenAI([Reply(text="again", hang=True), finish()]) as llm:
        retry = attempt(config, 2, llm.base_url)
        _, given = await run_until_message(retry, fresh(settings, tmp_path, "a2"), runner_bus, llm)
    # Messages arrive in stream order: had attempt 2 re-read "first", it would come first.
    assert given[0] == "second: also update the docs"
    assert "first: fix calc" not in given
    assert "first: fix calc" not in sent_texts(llm)
    assert "[message from ann] second: also update the docs" in sent_texts(llm)


async def test_resumed_attempt_gets_every_message_no_attempt_injected(
    bus: Bus, runner_bus: Bus, settings: RunnerSettings, tmp_path: Path
) -> None:
    # Attempt 1 died without a terminal event (and before its first model call): attempt 2
    # resumes the run, and no message reached the model yet, so it is given all of them,
    # the one sent while the run had no runner included.
    async with FakeOpenAI([Reply(text="working", hang=True), finish()]) as llm:
        config = make_config(llm.base_url, attempt=2)
        await say(bus, config.run_id, "early: sent to attempt 1")
        await bus.publish(
            subjects.run_event(config.run_id, "dispatched"),
            RunDispatched(runtime="local", handle="pid-1", attempt=2),
        )
        await say(bus, config.run_id, "later: sent while no runner ran")
        _, given = await run_until_message(config, settings, runner_bus, llm)
    assert given[:2] == ["early: sent to attempt 1", "later: sent while no runner ran"]


async def test_first_attempts_cancel_does_not_cancel_the_retry(
    bus: Bus, runner_bus: Bus, settings: RunnerSettings, tmp_path: Path
) -> None:
    async with FakeOpenAI([finish()]) as llm:
        config = make_config(llm.base_url)
        cancel = subjects.run_event(config.run_id, "cancel_requested")
        await bus.publish(cancel, CancelRequested(requested_by="ann"))
        first = await execute_run(config, fresh(settings, tmp_path, "a1"), runner_bus)
    assert isinstance(first, RunCancelled)
    async with FakeOpenAI([finish()]) as llm:
        second = await execute_run(
            attempt(config, 2, llm.base_url), fresh(settings, tmp_path, "a2"), runner_bus
        )
    assert isinstance(second, RunCompleted), second
    # A cancel sent after attempt 2 ended still stops attempt 3 before it starts work.
    await bus.publish(cancel, CancelRequested(requested_by="bob"))
    async with FakeOpenAI([finish()]) as llm:
        third = await execute_run(
            attempt(config, 3, llm.base_url), fresh(settings, tmp_path, "a3"), runner_bus
        )
        assert llm.requests == []
    assert isinstance(third, RunCancelled)
    assert third.cancelled_by == "bob"


async def test_later_attempt_without_scheduler_events_reads_the_whole_inbox(
    bus: Bus, runner_bus: Bus, settings: RunnerSettings
) -> None:
    # E.g. `python -m nexus_runner --config` with attempt 2 and no earlier attempt recorded:
    # nothing was given to a model, so every message of the run's inbox is.
    async with FakeOpenAI([Reply(text="working", hang=True), finish()]) as llm:
        config = make_config(llm.base_url, attempt=2)
        await say(bus, config.run_id, "old: before this attempt")
        handle = RunHandle()
        run = asyncio.create_task(execute_run(config, settings, runner_bus, handle=handle))
        await asyncio.wait_for(llm.hanging.wait(), 10)  # the control channel is listening
        await say(bus, config.run_id, "new: during this attempt")
        assert handle.control is not None
        while len(handle.control.received) < 2:
            await asyncio.wait_for(handle.control.message_arrived.wait(), 10)
            handle.control.message_arrived.clear()
        llm.release.set()
        terminal = await asyncio.wait_for(run, 10)
        received = [m.text for m in handle.control.received]
    assert isinstance(terminal, RunCompleted), terminal
    assert received == ["old: before this attempt", "new: during this attempt"]
    assert "[message from ann] new: during this attempt" in sent_texts(llm)
    assert "[message from ann] old: before this attempt" in sent_texts(llm)
