"""Schedules on a real NATS: fires with jitter, no double fire across a restart or replicas."""

from __future__ import annotations

from datetime import timedelta

from nexus_events import subjects
from nexus_events.bus import Bus
from nexus_events.events import RunRequested, ScheduleDefined, ScheduleFired, ScheduleRemoved
from nexus_events.streams import SCHEDULES
from nexus_scheduler.clock import ManualClock
from nexus_scheduler.schedule import jitter, run_id_for
from nexus_scheduler.schedules_service import ScheduleService

from ..waiting import eventually
from .conftest import AppFactory, run_events


async def fired(bus: Bus) -> list[ScheduleFired]:
    out = []
    async for d in bus.replay(SCHEDULES, filter_subject="nexus.schedule.v1.*.fired"):
        assert isinstance(d.event, ScheduleFired)
        out.append(d.event)
    return out


async def loaded(bus: Bus, clock: ManualClock, jitter_cap: float = 120) -> ScheduleService:
    svc = ScheduleService(bus, jitter_cap=jitter_cap, misfire_grace=300, clock=clock)
    await svc.load()
    return svc


async def test_cron_fires_with_jitter_and_never_twice_across_restarts(bus: Bus) -> None:
    defn = ScheduleDefined(agent_id="reviewer", task_id="task-7", cron="0 * * * *", input="go")
    await bus.publish(subjects.schedule_event("hourly", "defined"), defn)
    clock = ManualClock()
    first = await loaded(bus, clock)
    defined_at = first.schedules["hourly"].defined_at  # the stream's timestamp
    nominal = (defined_at + timedelta(hours=1)).replace(minute=0, second=0, microsecond=0)
    offset = jitter("hourly", 120)
    run_id = run_id_for("hourly", nominal)

    clock.set(nominal + offset - timedelta(seconds=1))
    assert await first.tick() == []
    clock.set(nominal + offset)
    assert await first.tick() == [run_id]
    assert await first.tick() == []

    # A restarted scheduler (or a second replica) rebuilds from the stream: nothing new fires.
    second = await loaded(bus, clock)
    assert second.schedules["hourly"].last_nominal == nominal
    assert await second.tick() == []
    # A replica that never saw the `fired` event tries again: the fire's msg id drops it.
    stale = ScheduleService(bus, jitter_cap=120, misfire_grace=300, clock=clock)
    async for d in bus.replay(SCHEDULES, filter_subject="nexus.schedule.v1.*.defined"):
        stale.observe(d, replay=True)
    assert await stale.tick() == [run_id]

    requested = await run_events(bus, "requested")
    assert len(requested) == 1
    got_id, req = requested[0]
    assert got_id == run_id
    assert isinstance(req, RunRequested)
    assert (req.agent_id, req.task_id, req.input, req.origin) == (
        "reviewer",
        "task-7",
        "go",
        "schedule",
    )
    assert [(f.run_id, f.scheduled_for) for f in await fired(bus)] == [(run_id, nominal)]

    clock.set(nominal + timedelta(hours=1) + offset)
    assert await second.tick() == [run_id_for("hourly", nominal + timedelta(hours=1))]


async def test_missed_fires_after_downtime_are_skipped(bus: Bus) -> None:
    defn = ScheduleDefined(agent_id="a", interval_seconds=600)
    await bus.publish(subjects.schedule_event("every10", "defined"), defn)
    clock = ManualClock()
    svc = await loaded(bus, clock, jitter_cap=0)
    defined_at = svc.schedules["every10"].defined_at
    clock.set(defined_at + timedelta(hours=2, minutes=1))  # down for two hours
    on_time = defined_at + timedelta(hours=2)
    assert await svc.tick() == [run_id_for("every10", on_time)]  # the one still in grace
    assert len(svc.missed["every10"]) == 11
    assert len(await run_events(bus, "requested")) == 1


async def test_removed_schedule_stops_firing(bus: Bus) -> None:
    clock = ManualClock()
    await bus.publish(
        subjects.schedule_event("gone", "defined"),
        ScheduleDefined(agent_id="a", interval_seconds=60),
    )
    await bus.publish(subjects.schedule_event("gone", "removed"), ScheduleRemoved())
    svc = await loaded(bus, clock)
    clock.advance(3600)
    assert await svc.tick() == []
    assert svc.schedules == {}


async def test_app_follows_schedule_events_and_fires_on_tick(
    make_app: AppFactory, bus: Bus, clock: ManualClock
) -> None:
    app = await make_app(schedule_jitter_cap_seconds=0)
    at = clock.now() + timedelta(minutes=5)
    await bus.publish(
        subjects.schedule_event("once", "defined"), ScheduleDefined(agent_id="a", at=at)
    )
    assert app.schedules is not None
    schedules = app.schedules

    async def seen() -> bool:
        return "once" in schedules.schedules

    await eventually(seen, what="schedule followed")
    assert await schedules.tick() == []
    clock.set(at)
    assert await schedules.tick() == [f"sched-once-{at:%Y%m%dT%H%M%S}"]
    clock.advance(3600)
    assert await schedules.tick() == []
