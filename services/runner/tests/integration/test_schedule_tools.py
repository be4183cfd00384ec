"""The schedule_* tools end to end: the fake model calls them in a real run, the real
scheduler (in-process, leading on the test's NATS) answers for the run it has prepared, and
the refusals (under 60 s, a bad cron) reach the model with the reason while the run goes on."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from nexus_events.contract import subjects
from nexus_events.contract.streams import SCHEDULES
from nexus_events.events import RunPrepared, ScheduleDefined
from nexus_events.events.runs import RunCompleted, ToolResult
from nexus_events.transport.bus import Bus, BusSettings
from nexus_scheduler.app import SchedulerApp
from nexus_scheduler.config import SchedulerSettings
from nexus_testing import eventually
from tests.fakes.openai_server import FakeOpenAI, Reply, ToolCall
from tests.support.noop_runtime import NoopRuntime

from nexus_runner.app import execute_run
from nexus_runner.config import RunnerSettings

from .support import make_config, run_events

TOOLS = ["schedule_create", "schedule_list", "finish"]


@pytest.fixture
async def scheduler(nats_url: str) -> AsyncIterator[SchedulerApp]:
    app = SchedulerApp(
        SchedulerSettings(health_port=None, tick_seconds=3600, lease_ttl_seconds=3),
        bus_settings=BusSettings(url=nats_url, name="scheduler"),
        runtime=NoopRuntime(),
    )
    await app.start()
    try:
        await eventually(lambda: _is(app.leading.is_set()), what="the scheduler leads")
        yield app
    finally:
        await app.stop()


async def _is(value: bool) -> bool:
    return value


def call(call_id: str, tool: str, **args: Any) -> Reply:
    return Reply(tool_calls=(ToolCall(tool, args, id=call_id),))


async def test_the_model_schedules_its_agent_and_reads_each_refusal(
    bus: Bus, runner_bus: Bus, settings: RunnerSettings, scheduler: SchedulerApp
) -> None:
    script = [
        call("c-fast", "schedule_create", interval_seconds=30, input="poll"),
        call("c-bad", "schedule_create", cron="at noon", input="poll"),
        call("c-ok", "schedule_create", cron="0 9 * * 1", input="review open PRs"),
        call("c-list", "schedule_list"),
        Reply(tool_calls=(ToolCall("finish", {"summary": "scheduled"}),)),
    ]
    async with FakeOpenAI(script) as llm:
        config = make_config(llm.base_url, tools=TOOLS)
        # The scheduler knows the run as it would have dispatched it.
        await bus.publish(subjects.run_event(config.run_id, "prepared"), RunPrepared(config=config))
        await eventually(
            lambda: _is(
                config.run_id in scheduler.service.state.runs if scheduler.service else False
            ),
            what="the scheduler holds the run",
        )
        terminal = await execute_run(config, settings, runner_bus)
    assert isinstance(terminal, RunCompleted), terminal
    told = {
        m["tool_call_id"]: m["content"]
        for m in llm.requests[-1]["messages"]
        if m.get("role") == "tool"
    }
    assert "interval_seconds 30 is under the minimum of 60 s" in told["c-fast"]
    assert "invalid cron 'at noon'" in told["c-bad"]
    assert told["c-ok"].startswith("created schedule agent-implementer-")
    assert "cron 0 9 * * 1: review open PRs" in told["c-list"]
    results = {
        e.call_id: e for e in await run_events(bus, config.run_id) if isinstance(e, ToolResult)
    }
    assert (results["c-fast"].ok, results["c-bad"].ok, results["c-ok"].ok) == (False, False, True)

    defined = [d.event async for d in bus.replay(SCHEDULES)]
    assert len(defined) == 1
    assert isinstance(defined[0], ScheduleDefined)
    assert (defined[0].created_by_run, defined[0].agent_id) == (config.run_id, "implementer")
