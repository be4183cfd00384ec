"""The runs page: what core's runs.list answers, newest first, and live: a run requested or
moved after the page was rendered reaches it over server-sent events."""

from __future__ import annotations

import asyncio
import logging

import aiohttp
import pytest
from nexus_core.app import CoreApp
from nexus_events.contract import subjects
from nexus_events.contract.runstate import RunStatus
from nexus_events.events import RunQueued, RunRequested
from nexus_events.transport.bus import Bus
from nexus_events.transport.run_requests import request_run
from nexus_testing.polling import eventually

from nexus_console.app import ConsoleApp

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


async def test_a_page_that_goes_away_ends_its_live_feed_quietly(
    bus: Bus, console: ConsoleApp, clients: Clients, caplog: pytest.LogCaptureFixture
) -> None:
    """A browser closing a page (or navigating away) is how every live feed ends: the next
    write finds the connection gone, which is no failure of the console's to log."""
    client = await clients()
    await client.login(READ_TOKEN)
    assert console.console is not None
    hub = console.console.hub
    async with client.http.get(f"{client.base}/live/runs") as r:
        assert r.status == 200
        await r.content.readline()  # the feed is open
    await eventually(lambda: hub.watchers, lambda n: n == 1, what="the feed watched")
    for n in range(50):  # events the closed page still wants, until its feed has ended
        await request_run(bus, f"gone-{n}", RunRequested(agent_id="a", input="x"), source="t")
        if hub.watchers == 0:
            break
        await asyncio.sleep(0.05)
    await eventually(lambda: hub.watchers, lambda n: n == 0, what="the feed ended")
    failures = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert not failures, [r.getMessage() for r in failures]
