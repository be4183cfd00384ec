"""Acceptance of agent schedules (issue 42) end to end: the scheduler with the local runtime,
the real `python -m nexus_runner` and the dev stack's offline model (its `schedule` script). A
run makes a schedule of its own, sleeps while the schedule fires twice, wakes, finds the
schedule in its list and deletes it; the schedule fires no more."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
from nexus_cli.devstack.offline_model import SCHEDULE_INPUT, WOKE
from nexus_events.contract.streams import SCHEDULES
from nexus_events.events import (
    Origin,
    RunCompleted,
    RunRequested,
    RunSleeping,
    ScheduleDefined,
    ScheduleRemoved,
)
from nexus_events.runtime.clock import ManualClock
from nexus_events.transport.bus import Bus

from tests.support.offline_model import offline_model

from ..waiting import eventually
from .conftest import AppFactory, publish_prepared, run_events
from .test_restart import pids, service  # noqa: F401 - `pids` is a fixture
from .test_sleep_real_runner import local_runtime, one_event, repo, run_config

pytestmark = pytest.mark.skipif(not Path("/proc").is_dir(), reason="needs /proc (Linux)")

TOOLS = ("schedule_create", "schedule_list", "schedule_delete", "sleep", "finish")
TASK = "[offline-model:schedule] Keep an eye on the nightly build."


async def _schedule_events(bus: Bus) -> list[tuple[str, object]]:
    return [(d.address.ids["schedule_id"], d.event) async for d in bus.replay(SCHEDULES)]


async def test_an_agent_makes_a_schedule_that_fires_twice_then_deletes_it(
    make_app: AppFactory,
    bus: Bus,
    clock: ManualClock,
    tmp_path: Path,
    nats_url: str,
    pids: list[int],  # noqa: F811
) -> None:
    url = repo(tmp_path / "origin")
    async with offline_model() as base_url:
        runtime = local_runtime(tmp_path, nats_url)
        app = await make_app(runtime, exit_grace_seconds=5, schedule_jitter_cap_seconds=0)
        svc = service(app)
        schedules = app.schedules
        assert schedules is not None
        await publish_prepared(bus, [run_config("maker", TASK, base_url, url, TOOLS)])
        sleeping: RunSleeping = await eventually(
            lambda: one_event(bus, "sleeping", "maker"),
            within=90,
            interval=0.2,
            what="maker sleeps",
        )
        [(schedule_id, defined)] = [
            (sid, e) for sid, e in await _schedule_events(bus) if isinstance(e, ScheduleDefined)
        ]
        assert (defined.created_by_run, defined.created_by_agent) == ("maker", "implementer")
        assert (defined.interval_seconds, defined.input) == (60, SCHEDULE_INPUT)

        # It fires twice while its maker sleeps (the scheduler's clock is moved).
        anchor = schedules.schedules[schedule_id].defined_at
        for n in (1, 2):
            clock.set(anchor + timedelta(seconds=60 * n))
            assert len(await schedules.tick()) == 1
        assert clock.now() < sleeping.until  # still asleep: the wake comes after both fires
        clock.set(sleeping.until + timedelta(milliseconds=1))
        await svc.tick()
        done: RunCompleted = await eventually(
            lambda: one_event(bus, "completed", "maker"), within=90, interval=0.2, what="completes"
        )
        # Deleted by the agent: the next due time fires nothing.
        clock.set(anchor + timedelta(seconds=600))
        assert await schedules.tick() == []

    fired = [
        e for r, e in await run_events(bus, "requested")
        if r.startswith("sched-") and isinstance(e, RunRequested)
    ]  # fmt: skip
    assert [(e.agent_id, e.origin, e.input) for e in fired] == [
        ("implementer", Origin.SCHEDULE, SCHEDULE_INPUT)
    ] * 2
    details = done.result.details
    assert details["created"] == schedule_id
    assert details["deleted"] is True
    assert schedule_id in details["listed"]  # what it listed after waking
    assert details["woke"].startswith(WOKE)
    assert "letting my schedule fire" in details["woke"]
    removed = [e for _, e in await _schedule_events(bus) if isinstance(e, ScheduleRemoved)]
    assert [e.removed_by for e in removed] == ["run:maker"]
