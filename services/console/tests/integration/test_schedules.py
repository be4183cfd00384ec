"""The schedules page on a real NATS: the schedules `nexus schedule ls` lists, paused and
resumed from the console (what `nexus schedule ls` shows changes), refused to a read viewer
and to a forged POST, live (a schedule defined elsewhere makes the page refresh), and who
made each (an agent's run, linked, or an operator)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import aiohttp
from nexus_cli.main import app as cli_app
from nexus_events.contract import subjects
from nexus_events.contract.streams import SCHEDULES
from nexus_events.events import ScheduleDefined
from nexus_events.transport.bus import Bus
from nexus_events.transport.schedule_records import define
from typer.testing import CliRunner

from .conftest import OPERATE_TOKEN, READ_TOKEN, Browserless, Clients


async def _cli_status(nats_url: str, tmp_path: Path, schedule_id: str) -> str:
    """What `nexus schedule ls` says of the schedule (the CLI in a thread: it runs its own
    event loop; this console's package tests cannot import the root tests' helper)."""
    env = {
        "NEXUS_DEV_HOME": str(tmp_path / ".nexus"),
        "NEXUS_CONTEXT_FILE": str(tmp_path / "contexts.yaml"),
        "NEXUS_NATS_URL": nats_url,
        "NEXUS_CONTEXT": "",
    }
    args = ["schedule", "ls", "-o", "json"]
    result = await asyncio.to_thread(
        CliRunner().invoke, cli_app, args, env=env, catch_exceptions=False
    )
    assert result.exit_code == 0, result.output
    rows = {s["schedule_id"]: s for s in json.loads(result.stdout)["schedules"]}
    return "paused" if not rows[schedule_id]["definition"]["enabled"] else "active"


async def _signed_in(clients: Clients, token: str) -> Browserless:
    client = await clients()
    await client.login(token)
    status, _ = await client.get("/schedules")
    assert status == 200
    return client


async def _defined_count(bus: Bus, schedule_id: str) -> int:
    flt = subjects.schedule_event(schedule_id, ScheduleDefined.event_name)
    return len([m async for m in bus.replay_raw(SCHEDULES, filter_subject=flt)])


async def test_pause_and_resume_from_the_console_change_what_the_cli_lists(
    bus: Bus, clients: Clients, nats_url: str, tmp_path: Path
) -> None:
    nightly = ScheduleDefined(agent_id="reporter", cron="0 3 * * *", task_id="t1")
    await define(bus, "nightly", nightly, "test")
    client = await _signed_in(clients, OPERATE_TOKEN)
    _, page = await client.get("/schedules")
    assert 'id="schedule-nightly"' in page
    assert "cron 0 3 * * * (UTC)" in page
    assert 'action="/schedules/nightly/pause"' in page

    status, row = await client.post("/schedules/nightly/pause", {"csrf": client.csrf})
    assert status == 200, row
    assert 'class="status paused"' in row
    assert await _cli_status(nats_url, tmp_path, "nightly") == "paused"
    # Pausing a paused schedule publishes nothing more.
    await client.post("/schedules/nightly/pause", {"csrf": client.csrf})
    assert await _defined_count(bus, "nightly") == 2

    status, row = await client.post("/schedules/nightly/resume", {"csrf": client.csrf})
    assert status == 200, row
    assert 'class="status active"' in row
    assert await _cli_status(nats_url, tmp_path, "nightly") == "active"
    assert await _defined_count(bus, "nightly") == 3
    assert (await client.post("/schedules/nope/pause", {"csrf": client.csrf}))[0] == 404
    assert (await client.post("/schedules/a.b/pause", {"csrf": client.csrf}))[0] == 400


async def test_a_read_viewer_and_a_forged_post_change_nothing(
    bus: Bus, clients: Clients, nats_url: str, tmp_path: Path
) -> None:
    await define(bus, "hourly", ScheduleDefined(agent_id="a", interval_seconds=3600), "test")
    reader = await _signed_in(clients, READ_TOKEN)
    _, page = await reader.get("/schedules")
    assert "disabled" in page.split('id="schedule-hourly"', 1)[1].split("</tr>", 1)[0]
    status, text = await reader.post("/schedules/hourly/pause", {"csrf": reader.csrf})
    assert status == 403
    assert "read-only console token" in text
    operator = await _signed_in(clients, OPERATE_TOKEN)
    status, _ = await operator.post("/schedules/hourly/pause", {})
    assert status == 403
    assert await _defined_count(bus, "hourly") == 1
    assert await _cli_status(nats_url, tmp_path, "hourly") == "active"


async def test_a_schedule_defined_elsewhere_reaches_the_open_page(
    bus: Bus, clients: Clients
) -> None:
    client = await _signed_in(clients, READ_TOKEN)
    _, page = await client.get("/schedules")
    assert 'hx-trigger="sse:schedule"' in page
    since = page.split("since=", 1)[1].split('"', 1)[0]
    received: list[str] = []

    async def follow() -> None:
        url = f"{client.base}/live/schedules?since={since}"
        async with client.http.get(url, timeout=aiohttp.ClientTimeout(total=30)) as r:
            assert r.status == 200
            async for raw in r.content:
                received.append(raw.decode())
                if "weekly" in "".join(received):
                    return

    task = asyncio.create_task(follow())
    await define(bus, "weekly", ScheduleDefined(agent_id="a", cron="0 9 * * 1"), "test")
    await asyncio.wait_for(task, 20)
    assert "event: schedule\n" in "".join(received)
    _, page = await client.get("/schedules")
    assert 'id="schedule-weekly"' in page


async def test_a_schedule_an_agent_made_names_its_run_and_agent(bus: Bus, clients: Clients) -> None:
    made = ScheduleDefined(
        agent_id="watcher", interval_seconds=600, created_by_run="run-w-7",
        created_by_agent="watcher",
    )  # fmt: skip
    await define(bus, "agent-made", made, "scheduler")
    await define(bus, "by-hand", ScheduleDefined(agent_id="watcher", cron="0 6 * * *"), "test")
    client = await _signed_in(clients, READ_TOKEN)
    _, page = await client.get("/schedules")
    assert "<th>Created by</th>" in page
    row = page.split('id="schedule-agent-made"', 1)[1].split("</tr>", 1)[0]
    assert 'watcher (run <a href="/runs/run-w-7">run-w-7</a>)' in row
    by_hand = page.split('id="schedule-by-hand"', 1)[1].split("</tr>", 1)[0]
    assert '<td class="created-by"><span class="hint">operator</span></td>' in by_hand
    assert "/runs/" not in by_hand
