"""An agent's own schedules on a real NATS, asked the way the runner's schedule_* tools ask
(`nexus_runner.tools.schedules.RunSchedules`) and answered by the scheduler's leader: a
schedule that fires twice and is deleted, the cap, the 60 s minimum and a bad cron refused
with the reason, and the agent, grants and liveness read from the run, not the request."""

from __future__ import annotations

from datetime import timedelta

import pytest
from nexus_events.contract import subjects
from nexus_events.contract.streams import SCHEDULES
from nexus_events.events import (
    Origin,
    RunRequested,
    ScheduleDefined,
    ScheduleRemoved,
    ToolGrant,
)
from nexus_events.runtime.clock import ManualClock
from nexus_events.transport.bus import Bus
from nexus_runner.errors import ToolError
from nexus_runner.tools.args import ScheduleCreateArgs, ScheduleDeleteArgs
from nexus_runner.tools.schedules import RunSchedules
from nexus_scheduler.app import SchedulerApp

from ..factories import config
from .conftest import AppFactory, eventually, publish_prepared, run_events

ALL = ["schedule_create", "schedule_list", "schedule_delete"]


async def _live(app: SchedulerApp, *run_ids: str) -> bool:
    return app.service is not None and all(r in app.service.state.runs for r in run_ids)


async def _prepared(bus: Bus, app: SchedulerApp, run_id: str, tools: list[str]) -> None:
    granted = config(run_id).model_copy(update={"tools": [ToolGrant(name=t) for t in tools]})
    await publish_prepared(bus, [granted])
    await eventually(lambda: _live(app, run_id), what=f"{run_id} live")


async def _schedule_events(bus: Bus) -> list[tuple[str, object]]:
    out = []
    async for d in bus.replay(SCHEDULES):
        out.append((d.address.ids["schedule_id"], d.event))
    return out


async def test_an_agent_schedule_fires_twice_then_is_deleted(
    bus: Bus, make_app: AppFactory, clock: ManualClock
) -> None:
    app = await make_app(schedule_jitter_cap_seconds=0)
    await _prepared(bus, app, "r-maker", ALL)
    tools = RunSchedules(bus.nc, "r-maker", timeout=5)

    made = await tools.create(
        ScheduleCreateArgs(interval_seconds=60, input="check the nightly build"), "call-1"
    )
    assert made.startswith("created schedule agent-implementer-")
    schedule_id = made.split()[2]
    # The same call again (a retry, a resumed attempt) is the same schedule.
    again = await tools.create(
        ScheduleCreateArgs(interval_seconds=60, input="check the nightly build"), "call-1"
    )
    assert again.split()[2] == schedule_id
    defined = [e for sid, e in await _schedule_events(bus) if sid == schedule_id]
    assert len(defined) == 1
    assert isinstance(defined[0], ScheduleDefined)
    assert (defined[0].agent_id, defined[0].created_by_run, defined[0].created_by_agent) == (
        "implementer",
        "r-maker",
        "implementer",
    )

    schedules = app.schedules
    assert schedules is not None
    anchor = schedules.schedules[schedule_id].defined_at
    for n in (1, 2):
        clock.set(anchor + timedelta(seconds=60 * n))
        assert len(await schedules.tick()) == 1
    requests = [
        (rid, e) for rid, e in await run_events(bus, "requested") if rid.startswith("sched-")
    ]
    assert len(requests) == 2
    for _, request in requests:
        assert isinstance(request, RunRequested)
        assert (request.agent_id, request.origin, request.input) == (
            "implementer",
            Origin.SCHEDULE,
            "check the nightly build",
        )

    listed = await tools.list()
    assert schedule_id in listed
    deleted = await tools.delete(ScheduleDeleteArgs(schedule_id=schedule_id))
    assert deleted.startswith(f"deleted schedule {schedule_id}")
    assert "- none" in deleted
    removed = [e for sid, e in await _schedule_events(bus) if sid == schedule_id]
    assert isinstance(removed[-1], ScheduleRemoved)
    assert removed[-1].removed_by == "run:r-maker"
    clock.set(anchor + timedelta(seconds=300))
    assert await schedules.tick() == []


async def test_the_cap_the_minimum_and_a_bad_cron_are_refused_and_named(
    bus: Bus, make_app: AppFactory
) -> None:
    app = await make_app()
    await _prepared(bus, app, "r-many", ALL)
    tools = RunSchedules(bus.nc, "r-many", timeout=5)
    for n in range(50):
        await tools.create(ScheduleCreateArgs(cron=f"{n % 60} 3 * * *", input=f"job {n}"), f"c{n}")
    with pytest.raises(ToolError) as refused:
        await tools.create(ScheduleCreateArgs(cron="0 4 * * *", input="one more"), "c50")
    assert "has 50 schedules, the most allowed (50, NEXUS_AGENT_SCHEDULES_MAX)" in str(
        refused.value
    )
    with pytest.raises(ToolError, match="interval_seconds 30 is under the minimum of 60 s"):
        await tools.create(ScheduleCreateArgs(interval_seconds=30, input="spin"), "c-fast")
    with pytest.raises(ToolError, match="invalid cron 'every day'"):
        await tools.create(ScheduleCreateArgs(cron="every day", input="x"), "c-bad")
    with pytest.raises(ToolError, match="no schedule 'agent-someone-else'"):
        await tools.delete(ScheduleDeleteArgs(schedule_id="agent-someone-else"))
    # None of the refusals made anything.
    defined = [e for _, e in await _schedule_events(bus) if isinstance(e, ScheduleDefined)]
    assert len(defined) == 50


async def test_the_agent_grants_and_liveness_come_from_the_run(
    bus: Bus, make_app: AppFactory
) -> None:
    app = await make_app()
    await _prepared(bus, app, "r-lister", ["schedule_list"])
    with pytest.raises(ToolError, match="not granted schedule_create"):
        await RunSchedules(bus.nc, "r-lister", timeout=5).create(
            ScheduleCreateArgs(interval_seconds=600, input="x"), "c1"
        )
    assert "0 of at most 50" in await RunSchedules(bus.nc, "r-lister", timeout=5).list()
    with pytest.raises(ToolError, match="run r-gone is not live"):
        await RunSchedules(bus.nc, "r-gone", timeout=5).list()
    # A body naming another agent is refused as a request: the agent is never the body's.
    reply = await bus.nc.request(
        subjects.agent_schedules("r-lister"), b'{"op": "list", "agent_id": "admin"}', timeout=5
    )
    assert (reply.headers or {}).get("Nats-Service-Error-Code") == "400"


async def test_without_a_leader_the_tool_says_the_scheduler_is_unavailable(bus: Bus) -> None:
    with pytest.raises(ToolError, match="the scheduler is unavailable \\(no scheduler answers\\)"):
        await RunSchedules(bus.nc, "r-x", timeout=1).list()
