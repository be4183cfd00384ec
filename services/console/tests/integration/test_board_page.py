"""The board page: core's board by column with each task's runs, and live: a task event or a
status change of a run the board shows marks it stale over SSE (the page then re-fetches it
once per burst); a run the board does not show does not."""

from __future__ import annotations

import asyncio

import aiohttp
from nexus_core.app import CoreApp
from nexus_events.contract import subjects
from nexus_events.contract.runstate import RunEvent
from nexus_events.events import RunQueued, RunRequested, TaskCreated, TaskMoved
from nexus_events.events.tasks import Column
from nexus_events.transport.bus import Bus
from nexus_events.transport.run_requests import request_run
from nexus_testing.polling import eventually

from .conftest import READ_TOKEN, Browserless, Clients


async def _board(client: Browserless) -> str:
    status, page = await client.get("/board")
    assert status == 200
    return page


def _column_of(page: str, task_id: str) -> str:
    """The column whose section holds the task's card."""
    before = page.split(f'id="task-{task_id}"', 1)[0]
    return before.rsplit('data-column="', 1)[1].split('"', 1)[0]


async def test_tasks_are_shown_by_column_with_their_runs_and_move_live(
    bus: Bus, core: CoreApp, clients: Clients
) -> None:
    await bus.publish(
        subjects.task_event("T-7", TaskCreated.event_name),
        TaskCreated(title="Fix the login", column=Column.TODO, labels=["bug"]),
    )
    await request_run(
        bus, "run-t7", RunRequested(agent_id="implementer", input="x", task_id="T-7"), source="t"
    )
    client = await clients()
    await client.login(READ_TOKEN)
    page = await eventually(
        lambda: _board(client),
        lambda p: 'href="/runs/run-t7"' in p and "Fix the login" in p,
        what="T-7 with its run",
    )
    assert ">bug<" in page
    # Core has moved it off todo by its run's status (no agent is applied: it failed).
    assert _column_of(page, "T-7") != Column.TODO.value
    assert 'sse-connect="/live/board?since=' in page

    since = page.split("since=", 1)[1].split('"', 1)[0]
    received: list[str] = []
    opened = asyncio.Event()

    async def follow() -> None:
        url = f"{client.base}/live/board?since={since}"
        async with client.http.get(url, timeout=aiohttp.ClientTimeout(total=30)) as r:
            assert r.status == 200
            async for raw in r.content:
                opened.set()
                received.append(raw.decode())
                text = "".join(received)
                if "requested run-t7b" in text and f"{TaskMoved.event_name} T-7" in text:
                    return

    task = asyncio.create_task(follow())
    await asyncio.wait_for(opened.wait(), 10)
    # A run no task holds changes nothing on the board: no record for it.
    await request_run(bus, "run-other", RunRequested(agent_id="x", input="y"), source="t")
    await bus.publish(
        subjects.run_event("run-other", RunQueued), RunQueued(position=1, limit="global")
    )
    await request_run(
        bus, "run-t7b", RunRequested(agent_id="implementer", input="z", task_id="T-7"), source="t"
    )
    await bus.publish(
        subjects.task_event("T-7", TaskMoved.event_name), TaskMoved(column=Column.REVIEW)
    )
    await asyncio.wait_for(task, 20)
    records = [r for r in "".join(received).split("\n\n") if "event: stale" in r]
    said = [r.rsplit("data: ", 1)[1].strip() for r in records]
    assert f"{RunEvent.REQUESTED.value} run-t7b" in said
    assert not [s for s in said if "run-other" in s]

    # The re-fetch the record causes shows the new current run and the earlier one.
    page = await eventually(
        lambda: _board(client),
        lambda p: 'run current">run <a href="/runs/run-t7b"' in p,
        what="run-t7b current on T-7",
    )
    assert 'run past">earlier <a href="/runs/run-t7"' in page
