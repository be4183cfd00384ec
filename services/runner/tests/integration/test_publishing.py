"""Pipelined run events: all stored, once, in order, before the end; failures end the run."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import pytest
from nats.js.api import StreamConfig
from nexus_events.contract import subjects
from nexus_events.contract.codec import Decoded
from nexus_events.contract.streams import LOGS, RUNS
from nexus_events.errors import PublishFailed
from nexus_events.events.logs import LogLine
from nexus_events.events.runs import Reason, RunCompleted, RunFailed, RunHeartbeat, RunTurn
from nexus_events.transport.bus import Bus, BusSettings
from nexus_testing import NatsServer, eventually
from tests.fakes.openai_server import FakeOpenAI, Reply, ToolCall

from nexus_runner.app import execute_run
from nexus_runner.config import RunnerSettings
from nexus_runner.publisher import RunPublisher

from .support import make_config, names, run_events

TURNS = 25


def _n(decoded: Decoded) -> int:
    """The per-run counter at the end of a deterministic id ``<run>:<attempt>:<event>:<n>``."""
    return int(decoded.envelope.event_id.rsplit(":", 1)[1])


async def _stored(bus: Bus, run_id: str) -> list[Decoded]:
    return [d async for d in bus.replay(RUNS, run_id=run_id)]


@contextlib.asynccontextmanager
async def _impatient_bus(nats_url: str, publish_deadline: float = 15) -> AsyncIterator[Bus]:
    """A runner connection that gives up on an ack quickly and reconnects quickly."""
    settings = BusSettings(
        url=nats_url,
        name="runner",
        publish_timeout=0.3,
        publish_deadline=publish_deadline,
        reconnect_time_wait=0.05,
    )
    b = await Bus.connect(settings, source="runner")
    try:
        yield b
    finally:
        await b.close()


async def test_pipelined_events_are_all_stored_in_order_before_the_terminal(
    bus: Bus, runner_bus: Bus, settings: RunnerSettings
) -> None:
    script = [
        Reply(text=f"step {i}", tool_calls=(ToolCall("list_files", {"pattern": f"*{i}"}),))
        for i in range(TURNS)
    ]
    script.append(Reply(tool_calls=(ToolCall("finish", {"summary": "done"}),)))
    async with FakeOpenAI(script) as llm:
        config = make_config(llm.base_url, budgets={"max_turns": TURNS + 5})
        terminal = await execute_run(config, settings, runner_bus)
    assert isinstance(terminal, RunCompleted), terminal

    stored = await _stored(bus, config.run_id)
    # Every event once, in the order the run published it: the counters are 1..N in
    # stream order, heartbeats (sent by another task) included, and the terminal is last.
    assert [_n(d) for d in stored] == list(range(1, len(stored) + 1))
    assert [d.envelope.event_id for d in stored] == [
        f"{config.run_id}:1:{type(d.event).event_name}:{_n(d)}" for d in stored
    ]
    work = [d.event for d in stored if not isinstance(d.event, RunHeartbeat)]
    assert names(work) == [
        "started",
        *["turn", "tool_called", "tool_result"] * (TURNS + 1),
        "completed",
    ]
    assert [e.turn for e in work if isinstance(e, RunTurn)] == list(range(1, TURNS + 2))
    assert isinstance(stored[-1].event, RunCompleted)
    beats = [d.event.seq for d in stored if isinstance(d.event, RunHeartbeat)]
    assert beats == list(range(1, len(beats) + 1))

    # The log lines too: one per turn with text, each once and in order.
    lines = [
        d.event
        async for d in bus.replay(LOGS, filter_subject=subjects.run_log(config.run_id))
        if isinstance(d.event, LogLine)
    ]
    assert [line.seq for line in lines] == list(range(len(lines)))
    assert "".join(line.text for line in lines if line.stream == "llm_text") == "".join(
        f"step {i}" for i in range(TURNS)
    )


async def test_events_sent_while_nats_is_down_are_stored_once_in_order(
    bus: Bus, nats_url: str, nats_server: NatsServer
) -> None:
    async with _impatient_bus(nats_url) as runner_bus:
        pub = RunPublisher(runner_bus, "run-outage", 1)
        await pub.event(RunTurn(turn=1, model="m"))
        await pub.flush()

        nats_server.stop()
        await eventually(lambda: not runner_bus.nc.is_connected, what="disconnected")

        async def publish_more() -> None:
            for turn in range(2, 6):
                await pub.event(RunTurn(turn=turn, model="m"))
            await pub.flush()

        publishing = asyncio.create_task(publish_more())
        # No ack comes: the events are being published again (same ids) while NATS is away.
        await eventually(lambda: pub.republished > 0, what="retrying")
        await asyncio.to_thread(nats_server.start)
        await asyncio.wait_for(publishing, 20)

    await eventually(lambda: bus.nc.is_connected, what="reconnected")
    stored = await _stored(bus, "run-outage")
    assert [d.event.turn for d in stored if isinstance(d.event, RunTurn)] == [1, 2, 3, 4, 5]
    assert [_n(d) for d in stored] == [1, 2, 3, 4, 5]


async def test_a_failed_publish_is_not_swallowed(
    bus: Bus, nats_url: str, nats_server: NatsServer
) -> None:
    async with _impatient_bus(nats_url, publish_deadline=1.0) as runner_bus:
        pub = RunPublisher(runner_bus, "run-gone", 1)
        await pub.event(RunTurn(turn=1, model="m"))
        await pub.flush()

        nats_server.stop()
        await eventually(lambda: not runner_bus.nc.is_connected, what="disconnected")
        await pub.event(RunTurn(turn=2, model="m"))  # queued for a connection that is gone
        with pytest.raises(PublishFailed):
            await pub.flush()
        # The failure sticks: nothing more is taken as if the record were whole.
        with pytest.raises(PublishFailed):
            await pub.event(RunTurn(turn=3, model="m"))
        with pytest.raises(PublishFailed):
            await pub.flush()
        # Back up before closing: nats-py fails to close a connection while it reconnects.
        await asyncio.to_thread(nats_server.start)
        await eventually(lambda: runner_bus.nc.is_connected, what="reconnected")


async def test_a_refused_event_fails_the_run(
    bus: Bus, nats_url: str, settings: RunnerSettings
) -> None:
    # The log stream takes nothing bigger than 10 bytes: every log line is refused.
    info = await bus.js.stream_info(LOGS)
    config_: StreamConfig = info.config
    config_.max_msg_size = 10
    await bus.js.update_stream(config_)
    script = [
        Reply(text="a long enough thought", tool_calls=(ToolCall("list_files", {}),)),
        Reply(text="more", tool_calls=(ToolCall("list_files", {}),)),
        Reply(tool_calls=(ToolCall("finish", {"summary": "done"}),)),
    ]
    async with FakeOpenAI(script) as llm, _impatient_bus(nats_url) as runner_bus:
        config = make_config(llm.base_url)
        terminal = await execute_run(config, settings, runner_bus)

    assert isinstance(terminal, RunFailed), terminal
    assert terminal.reason == Reason.RUNNER_ERROR
    assert "refused" in terminal.message
    events = await run_events(bus, config.run_id)
    assert names(events)[-1] == "failed"
    assert "completed" not in names(events)
