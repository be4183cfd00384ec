"""The usage page: core's usage.summary per day, agent, flow and task, charted and tabled;
a malformed or inverted range is a 400 naming the field."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime

from nexus_core.app import CoreApp
from nexus_events.contract import subjects
from nexus_events.events import RunRequested, RunTurn
from nexus_events.transport.bus import Bus
from nexus_events.transport.run_requests import request_run
from nexus_testing.polling import eventually

from .conftest import READ_TOKEN, Clients


async def test_cost_and_tokens_per_day_agent_and_task(
    bus: Bus, core: CoreApp, clients: Clients
) -> None:
    for run_id, agent, cost in (
        ("u-1", "planner", 0.5),
        ("u-2", "planner", 0.25),
        ("u-3", "tester", 1.0),
    ):
        request = RunRequested(agent_id=agent, task_id="T-1", input="x")
        await request_run(bus, run_id, request, source="t")
        turn = RunTurn(turn=1, model="m", tokens_in=100, tokens_out=10, cost_usd=cost)
        await bus.publish(subjects.run_event(run_id, RunTurn), turn)
    client = await clients()
    await client.login(READ_TOKEN)

    async def page() -> str:
        status, text = await client.get("/usage")
        assert status == 200
        return text

    text = await eventually(page, lambda t: "$1.0000" in t and "$0.7500" in t, what="usage")
    charts = [
        json.loads(raw.replace("&#34;", '"')) for raw in re.findall(r'data-chart="([^"]*)"', text)
    ]
    by = {c["by"]: c for c in charts}
    assert set(by) == {"day", "agent", "flow", "task"}
    assert by["flow"]["labels"] == ["(none)"]  # no run came from a flow
    assert by["agent"]["labels"] == ["tester", "planner"]
    assert by["agent"]["cost_usd"] == [1.0, 0.75]
    assert by["agent"]["tokens"] == [110, 220]
    assert by["day"]["labels"] == [datetime.now(UTC).date().isoformat()]
    assert by["task"]["labels"] == ["T-1"]
    assert by["day"]["kind"] == "line"


async def test_a_bad_range_is_a_400(core: CoreApp, clients: Clients) -> None:
    client = await clients()
    await client.login(READ_TOKEN)
    status, text = await client.get("/usage?since=yesterday")
    assert status == 400
    assert "since" in text
    status, text = await client.get("/usage?since=2026-02-02&until=2026-01-01")
    assert status == 400
    assert "until must not be before since" in text
