"""Schedules on a real NATS: fires with jitter, no double fire across a restart or replicas."""

from __future__ import annotations

from datetime import timedelta

from nexus_events.contract import subjects
from nexus_events.contract.streams import SCHEDULES
from nexus_events.events import (
    CancelRequested,
    RunCancelled,
    RunCompleted,
    RunRequested,
    ScheduleDefined,
    ScheduleFired,
    ScheduleRemoved,
)
from nexus_events.events.schedules import ScheduleMissed
from nexus_events.runtime.clock import ManualClock
from nexus_events.transport.bus import Bus
from nexus_scheduler.schedule import OverlapPolicy, jitter, run_id_for
from nexus_scheduler.schedules_service import MAX_MISSED_EVENTS, SUPERSEDED, ScheduleService

from tests.support.noop_runtime import NoopRuntime

from ..factories import config
from ..waiting import eventually
from .conftest import AppFactory, publish, publish_prepared, run_events


async def fired(bus: Bus) -> list[ScheduleFired]:
    out = []
    async for d in bus.replay(SCHEDULES, filter_subject="nexus.schedule.v1.*.fired"):
        assert isinstance(d.event, ScheduleFired)
        out.append(d.event)
    return out


async def missed(bus: Bus) -> list[ScheduleMissed]:
    out = []
    async for d in bus.replay(SCHEDULES, filter_subject="nexus.schedule.v1.*.missed"):
        assert isinstance(d.event, ScheduleMissed)
        out.append(d.event)
    return out


async def loaded(
    bus: Bus,
    clock: ManualClock,
    jitter_cap: float = 120,
    *,
    overlap: OverlapPolicy = "queue",
) -> ScheduleService:
    svc = ScheduleService(
        bus, jitter_cap=jitter_cap, misfire_grace=300, overlap=overlap, clock=clock
    )
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


async def test_missed_fires_are_recorded_and_not_reconsidered_after_a_restart(bus: Bus) -> None:
    await bus.publish(
        subjects.schedule_event("every10", "defined"),
        ScheduleDefined(agent_id="a", interval_seconds=600),
    )
    clock = ManualClock()
    svc = await loaded(bus, clock, jitter_cap=0)
    defined_at = svc.schedules["every10"].defined_at
    clock.set(defined_at + timedelta(hours=2, minutes=1))
    assert await svc.tick() == [run_id_for("every10", defined_at + timedelta(hours=2))]
    recorded = await missed(bus)
    assert [m.scheduled_for for m in recorded] == [
        defined_at + timedelta(minutes=10 * i) for i in range(1, 12)
    ]
    assert all(m.reason.startswith("missed:") for m in recorded)

    # A restart folds the `missed` events: nothing is missed (or fired) a second time.
    again = await loaded(bus, clock, jitter_cap=0)
    assert again.schedules["every10"].skipped_until == defined_at + timedelta(minutes=110)
    assert await again.tick() == []
    assert len(await missed(bus)) == 11
    assert len(await run_events(bus, "requested")) == 1


async def test_a_long_downtime_records_only_the_latest_missed_fires(bus: Bus) -> None:
    await bus.publish(
        subjects.schedule_event("minutely", "defined"),
        ScheduleDefined(agent_id="a", cron="* * * * *"),
    )
    clock = ManualClock()
    svc = await loaded(bus, clock, jitter_cap=0)
    defined_at = svc.schedules["minutely"].defined_at
    clock.set(defined_at + timedelta(hours=3))
    await svc.tick()
    recorded = await missed(bus)
    assert len(recorded) == MAX_MISSED_EVENTS
    untold = len(svc.missed["minutely"]) - MAX_MISSED_EVENTS
    assert untold > 0
    assert f"({untold} earlier fires also missed)" in recorded[0].reason
    assert recorded[-1].scheduled_for == max(svc.missed["minutely"])


async def test_schedule_catch_up_one_overrides_the_scheduler_default(bus: Bus) -> None:
    await bus.publish(
        subjects.schedule_event("catchup", "defined"),
        ScheduleDefined(agent_id="a", interval_seconds=600, missed_policy="catch_up_one"),
    )
    clock = ManualClock()
    svc = await loaded(bus, clock, jitter_cap=0)  # the service default is `skip`
    defined_at = svc.schedules["catchup"].defined_at
    clock.set(defined_at + timedelta(minutes=65))  # 6 fires passed, all beyond the grace
    latest = defined_at + timedelta(minutes=60)
    assert await svc.tick() == [run_id_for("catchup", latest)]
    assert [m.scheduled_for for m in await missed(bus)] == [
        defined_at + timedelta(minutes=10 * i) for i in range(1, 6)
    ]
    assert await svc.tick() == []


async def _interval_schedule(
    bus: Bus, schedule_id: str, overlap: OverlapPolicy | None, default: OverlapPolicy = "queue"
) -> tuple[ScheduleService, ManualClock, timedelta]:
    """A 10-minute schedule, loaded; returns the service, its clock and the first fire."""
    await bus.publish(
        subjects.schedule_event(schedule_id, "defined"),
        ScheduleDefined(agent_id="a", interval_seconds=600, overlap_policy=overlap),
    )
    clock = ManualClock()
    svc = await loaded(bus, clock, jitter_cap=0, overlap=default)
    clock.set(svc.schedules[schedule_id].defined_at)
    return svc, clock, timedelta(minutes=10)


async def test_overlap_skip_records_the_fire_missed_while_the_previous_run_is_active(
    bus: Bus,
) -> None:
    svc, clock, step = await _interval_schedule(bus, "nightly", "skip")
    start = clock.now()
    first = run_id_for("nightly", start + step)
    clock.set(start + step)
    assert await svc.tick() == [first]
    clock.set(start + 2 * step)
    assert await svc.tick() == []  # `first` has not ended
    [skipped] = await missed(bus)
    assert skipped.scheduled_for == start + 2 * step
    assert skipped.reason == f"overlap: previous run {first} still active"
    # A restart does not reconsider the skipped fire.
    assert await (await loaded(bus, clock, jitter_cap=0, overlap="skip")).tick() == []

    await publish(bus, first, RunCompleted())
    clock.set(start + 3 * step)
    assert await svc.tick() == [run_id_for("nightly", start + 3 * step)]
    assert [rid for rid, _ in await run_events(bus, "requested")] == [
        first,
        run_id_for("nightly", start + 3 * step),
    ]
    assert await run_events(bus, "cancel_requested") == []


async def test_overlap_queue_requests_the_run_while_the_previous_is_active(bus: Bus) -> None:
    # The schedule says `queue` although the scheduler default is `skip`.
    svc, clock, step = await _interval_schedule(bus, "q", "queue", default="skip")
    start = clock.now()
    clock.set(start + step)
    await svc.tick()
    clock.set(start + 2 * step)
    assert await svc.tick() == [run_id_for("q", start + 2 * step)]
    assert len(await run_events(bus, "requested")) == 2  # admission queues it under limits
    assert await missed(bus) == []
    assert await run_events(bus, "cancel_requested") == []


async def test_overlap_default_applies_to_schedules_without_a_policy(bus: Bus) -> None:
    svc, clock, step = await _interval_schedule(bus, "d", None, default="skip")
    start = clock.now()
    clock.set(start + step)
    await svc.tick()
    clock.set(start + 2 * step)
    assert await svc.tick() == []
    assert [m.reason.split(":")[0] for m in await missed(bus)] == ["overlap"]


async def test_overlap_cancel_previous_cancels_then_fires(bus: Bus) -> None:
    svc, clock, step = await _interval_schedule(bus, "c", "cancel_previous")
    start = clock.now()
    first, second = run_id_for("c", start + step), run_id_for("c", start + 2 * step)
    clock.set(start + step)
    assert await svc.tick() == [first]
    clock.set(start + 2 * step)
    assert await svc.tick() == [second]
    [(cancelled, cancel)] = await run_events(bus, "cancel_requested")
    assert cancelled == first
    assert isinstance(cancel, CancelRequested)
    assert (cancel.reason, cancel.requested_by) == (SUPERSEDED, "schedule:c")
    assert [rid for rid, _ in await run_events(bus, "requested")] == [first, second]

    # The previous run ended meanwhile: nothing to cancel at the next fire.
    await publish(bus, second, RunCompleted())
    clock.set(start + 3 * step)
    assert await svc.tick() == [run_id_for("c", start + 3 * step)]
    assert len(await run_events(bus, "cancel_requested")) == 1


async def test_cancel_previous_through_the_app_ends_the_previous_run_cancelled(
    make_app: AppFactory, bus: Bus, clock: ManualClock
) -> None:
    runtime = NoopRuntime()
    app = await make_app(runtime, schedule_jitter_cap_seconds=0, cancel_grace_seconds=30)
    assert app.schedules is not None
    assert app.service is not None
    schedules, service = app.schedules, app.service
    await bus.publish(
        subjects.schedule_event("ci", "defined"),
        ScheduleDefined(agent_id="a", interval_seconds=600, overlap_policy="cancel_previous"),
    )

    async def seen() -> bool:
        return "ci" in schedules.schedules

    await eventually(seen, what="schedule followed")
    defined_at = schedules.schedules["ci"].defined_at
    clock.set(defined_at + timedelta(minutes=10))
    [first] = await schedules.tick()
    await publish_prepared(bus, [config(first, "a")])  # what core does with the request

    async def dispatched(run_id: str) -> bool:
        return any(r == run_id for r, _ in await run_events(bus, "dispatched"))

    await eventually(lambda: dispatched(first), what="first run dispatched")
    clock.set(defined_at + timedelta(minutes=20))
    [second] = await schedules.tick()

    async def cancel_seen() -> bool:
        entry = service.state.runs.get(first)
        return entry is not None and entry.cancel is not None

    await eventually(cancel_seen, what="cancel folded")
    clock.advance(30)  # the runner did not stop within the grace period
    await service.tick()
    [(rid, ended)] = await run_events(bus, "cancelled")
    assert rid == first
    assert isinstance(ended, RunCancelled)
    assert (ended.reason, ended.cancelled_by) == (SUPERSEDED, "schedule:ci")
    assert runtime.cancelled == [first]
    assert second != first
