"""A run ended by someone else (the scheduler's lost or timed_out) is final: the runner stops,
does nothing more in the run's name and publishes no ending of its own."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from nexus_events.contract import subjects
from nexus_events.events.runs import Reason, RunLost, RunTimedOut, ToolCalled
from nexus_events.transport.bus import Bus
from tests.fakes.openai_server import FakeOpenAI, Reply, ToolCall

from nexus_runner.app import execute_run
from nexus_runner.config import RunnerSettings

from .support import make_config, names, run_events, wait_for

TERMINAL = {"completed", "failed", "cancelled", "timed_out", "lost"}


def tc(name: str, **args: Any) -> ToolCall:
    return ToolCall(name=name, arguments=args)


def finish(summary: str = "done") -> Reply:
    return Reply(tool_calls=(tc("finish", summary=summary),))


async def test_lost_mid_tool_stops_the_runner_before_it_finishes(
    bus: Bus, runner_bus: Bus, settings: RunnerSettings, tmp_path: Path
) -> None:
    marker = tmp_path / "survived"
    command = f"sleep 30; touch {marker}"
    script = [Reply(tool_calls=(tc("run_shell", command=command),)), finish()]
    async with FakeOpenAI(script) as llm:
        config = make_config(llm.base_url)
        run = asyncio.create_task(execute_run(config, settings, runner_bus))
        called = await wait_for(bus, config.run_id, "tool_called")
        assert isinstance(called, ToolCalled)
        lost = RunLost(reason=Reason.HEARTBEAT_MISSING, message="no heartbeat for 90s")
        await bus.publish(subjects.run_event(config.run_id, "lost"), lost)
        terminal = await asyncio.wait_for(run, 10)
        assert len(llm.requests) == 1  # never asked the model again, never reached finish
    assert isinstance(terminal, RunLost)
    assert not marker.exists()  # the tool was killed
    events = names(await run_events(bus, config.run_id))
    assert [e for e in events if e in TERMINAL] == ["lost"]
    # Nothing of the run's work after it. A heartbeat the runner sent before its consumer
    # delivered `lost` can still be stored after it (the runner cannot know sooner); once it
    # has read `lost` it sends none (watch_ended stops them).
    after = events[events.index("lost") + 1 :]
    assert set(after) <= {"heartbeat"}, after


async def test_timed_out_before_start_is_honoured(
    bus: Bus, runner_bus: Bus, settings: RunnerSettings
) -> None:
    async with FakeOpenAI([finish()]) as llm:
        config = make_config(llm.base_url)
        await bus.publish(
            subjects.run_event(config.run_id, "timed_out"), RunTimedOut(limit_seconds=60)
        )
        terminal = await asyncio.wait_for(execute_run(config, settings, runner_bus), 10)
    assert isinstance(terminal, RunTimedOut)
    events = names(await run_events(bus, config.run_id))
    assert [e for e in events if e in TERMINAL] == ["timed_out"]
