"""The runner's `delegate` tool end to end: a real parent run (nexus_runner, fake model)
delegates to a reviewer through the gateway, the child run ends, and the parent's tool call
returns the child's result; the definition's allow-list refuses other agents."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from nexus_events.contract import subjects
from nexus_events.events import RunCompleted, RunRequested, ToolCalled, ToolResult
from nexus_events.events.runs import RunConfig, RunResult
from nexus_events.transport.bus import Bus, BusSettings
from nexus_runner.app import execute_run
from nexus_runner.config import RunnerSettings
from nexus_testing import eventually
from tests.fakes.openai_server import FakeOpenAI, Reply, ToolCall
from tests.support.gateway import run_requests

DELEGATE = {"name": "delegate", "options": {"agents": ["reviewer"]}}


@pytest.fixture
async def runner_bus(bus: Bus, nats_url: str) -> AsyncIterator[Bus]:
    b = await Bus.connect(BusSettings(url=nats_url, name="runner"), source="runner")
    try:
        yield b
    finally:
        await b.close()


@pytest.fixture
def settings(tmp_path: Path) -> RunnerSettings:
    return RunnerSettings(
        workspace_root=tmp_path / "runs",
        llm_api_key="test",
        heartbeat_interval=0.2,
        retry_base_delay=0.01,
        retry_max_delay=0.5,
        budget_reservations="off",  # no spend service here
    )


def config(base_url: str, run_id: str) -> RunConfig:
    body: dict[str, Any] = {
        "run_id": run_id,
        "agent_id": "implementer",
        "system_prompt": "You implement and ask for reviews.",
        "input": "Ship the login fix.",
        "model": {"name": "gpt-4o-mini", "base_url": base_url},
        "tools": [DELEGATE, "finish"],
    }
    return RunConfig.model_validate(body)


async def _events(bus: Bus, run_id: str) -> list[Any]:
    from nexus_events.contract.streams import RUNS

    return [d.event async for d in bus.replay(RUNS, run_id=run_id)]


async def test_delegate_waits_for_the_child_and_returns_its_result(
    bus: Bus, runner_bus: Bus, settings: RunnerSettings, make_gateway: object
) -> None:
    await make_gateway()  # type: ignore[operator]
    script = [
        Reply(
            tool_calls=(
                ToolCall("delegate", {"agent": "reviewer", "input": "review it", "timeout": 60}),
            )
        ),
        Reply(tool_calls=(ToolCall("finish", {"summary": "shipped after review"}),)),
    ]
    async with FakeOpenAI(script) as llm:
        parent = asyncio.create_task(
            execute_run(config(llm.base_url, "run_parent2"), settings, runner_bus)
        )
        # Act as the child's runner: the gateway requested the child; end it.
        requests = await eventually(lambda: run_requests(bus), within=30, what="child run")
        child = requests[0]
        assert isinstance(child.event, RunRequested)
        assert (child.event.agent_id, child.event.parent_run_id) == ("reviewer", "run_parent2")
        assert child.event.input == "review it"
        assert child.address.run_id is not None
        await bus.publish(
            subjects.run_event(child.address.run_id, "completed"),
            RunCompleted(result=RunResult(summary="LGTM with one nit")),
        )
        terminal = await asyncio.wait_for(parent, 60)
    assert isinstance(terminal, RunCompleted)
    results = [e for e in await _events(bus, "run_parent2") if isinstance(e, ToolResult)]
    delegated = [r for r in results if r.tool == "delegate"]
    assert len(delegated) == 1
    assert delegated[0].ok
    assert "LGTM with one nit" in delegated[0].output
    assert "LGTM with one nit" in str(llm.requests[1]["messages"][-1]["content"])


async def test_delegate_to_an_agent_off_the_allow_list_is_refused(
    bus: Bus, runner_bus: Bus, settings: RunnerSettings
) -> None:
    script = [
        Reply(tool_calls=(ToolCall("delegate", {"agent": "tester", "input": "x"}),)),
        Reply(tool_calls=(ToolCall("finish", {"summary": "done alone"}),)),
    ]
    async with FakeOpenAI(script) as llm:
        terminal = await execute_run(config(llm.base_url, "run_parent3"), settings, runner_bus)
    assert isinstance(terminal, RunCompleted)
    called = [e for e in await _events(bus, "run_parent3") if isinstance(e, ToolCalled)]
    assert called[0].refused
    assert "may delegate only to: reviewer" in (called[0].refusal_reason or "")
    assert await run_requests(bus) == []
    assert "may delegate only to" in str(llm.requests[1]["messages"][-1]["content"])
