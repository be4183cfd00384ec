"""The runs page: what core's runs.list answers, newest first, and live: a run requested or
moved after the page was rendered reaches it over server-sent events."""

from __future__ import annotations

import asyncio

import aiohttp
from nexus_core.app import CoreApp
from nexus_events.contract import subjects
from nexus_events.contract.runstate import RunStatus
from nexus_events.events import RunQueued, RunRequested
from nexus_events.transport.bus import Bus
from nexus_events.transport.run_requests import request_run
from nexus_testing.polling import eventually

from .conftest import READ_TOKEN, Clients


async def test_runs_are_listed_and_a_new_run_arrives_live(
    bus: Bus, core: CoreApp, clients: Clients
) -> None:
    await request_run(bus, "run-old", RunRequested(agent_id="implementer", input="x"), source="t")
    client = await clients()
    await client.login(READ_TOKEN)

    async def runs_page() -> str:
        status, page = await client.get("/runs")
        assert status == 200
        return page

    page = await eventually(runs_page, lambda p: "run-old" in p, what="run-old listed")
    assert 'sse-connect="/live/runs?' in page

    since = page.split("since=", 1)[1].split('"', 1)[0]
    received: list[str] = []

    async def follow() -> None:
        url = f"{client.base}/live/runs?since={since}"
        async with client.http.get(url, timeout=aiohttp.ClientTimeout(total=30)) as r:
            assert r.status == 200
            async for raw in r.content:
                received.append(raw.decode())
                if "run-new" in "".join(received) and "queued" in "".join(received):
                    return

    task = asyncio.create_task(follow())
    await request_run(bus, "run-new", RunRequested(agent_id="reviewer", input="y"), source="t")
    queued = RunQueued(position=1, limit="global")
    await bus.publish(subjects.run_event("run-new", RunQueued), queued)
    await asyncio.wait_for(task, 20)
    text = "".join(received)
    assert "event: run" in text
    assert 'id="run-run-new"' in text
    assert f'class="status {RunStatus.QUEUED.value}"' in text
