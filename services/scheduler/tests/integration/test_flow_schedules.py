"""Schedules that start flows, on a real NATS: each fire is one `FlowRequested` on NEXUS_FLOWS
(never a run), with a derived flow run id; overlap policies read the previous flow run's end."""

from __future__ import annotations

from datetime import timedelta

from nexus_events.contract import subjects
from nexus_events.contract.streams import FLOWS
from nexus_events.events import (
    FlowCancelRequested,
    FlowCompleted,
    FlowRequested,
    ScheduleDefined,
)
from nexus_events.runtime.clock import ManualClock
from nexus_events.transport.bus import Bus
from nexus_scheduler.schedule import OverlapPolicy, run_id_for
from nexus_scheduler.schedules_service import SUPERSEDED, ScheduleService

from .conftest import run_events
from .test_schedules import fired, missed


async def flow_events(bus: Bus, name: str) -> list[tuple[str, object]]:
    out = []
    async for d in bus.replay(FLOWS, filter_subject=subjects.flow_events_filter(None, name)):
        out.append((d.address.ids["flow_run_id"], d.event))
    return out


async def defined(
    bus: Bus, schedule_id: str, clock: ManualClock, overlap: OverlapPolicy = "queue"
) -> ScheduleService:
    defn = ScheduleDefined(
        flow="feature",
        task_id="task-9",
        input="nightly",
        interval_seconds=600,
        overlap_policy=overlap,
    )
    await bus.publish(subjects.schedule_event(schedule_id, "defined"), defn)
    svc = ScheduleService(bus, jitter_cap=0, misfire_grace=300, clock=clock)
    await svc.load()
    clock.set(svc.schedules[schedule_id].defined_at + timedelta(seconds=600))
    return svc


async def test_a_flow_schedule_requests_one_flow_per_fire_and_no_run(bus: Bus) -> None:
    clock = ManualClock()
    svc = await defined(bus, "nightly", clock)
    first_at = svc.schedules["nightly"].defined_at + timedelta(seconds=600)
    first = run_id_for("nightly", first_at)
    assert await svc.tick() == [first]
    assert await svc.tick() == []
    # A restarted scheduler rebuilds from the stream: the fire is not requested again.
    again = ScheduleService(bus, jitter_cap=0, misfire_grace=300, clock=clock)
    await again.load()
    assert await again.tick() == []
    clock.advance(600)
    second = run_id_for("nightly", first_at + timedelta(seconds=600))
    assert await again.tick() == [second]

    requested = await flow_events(bus, "requested")
    assert [rid for rid, _ in requested] == [first, second]
    req = requested[0][1]
    assert isinstance(req, FlowRequested)
    assert (req.flow, req.task_id, req.input, req.origin, req.requested_by) == (
        "feature",
        "task-9",
        "nightly",
        "schedule",
        "schedule:nightly",
    )
    assert req.labels["schedule_id"] == "nightly"
    assert await run_events(bus, "requested") == []
    assert [f.run_id for f in await fired(bus)] == [first, second]


async def test_overlap_skip_waits_for_the_previous_flow_run_to_end(bus: Bus) -> None:
    clock = ManualClock()
    svc = await defined(bus, "skipper", clock, overlap="skip")
    [first] = await svc.tick()
    clock.advance(600)
    assert await svc.tick() == []  # the first flow run has no terminal event yet
    [skipped] = await missed(bus)
    assert skipped.reason == f"overlap: previous run {first} still active"
    await bus.publish(subjects.flow_event(first, "completed"), FlowCompleted())
    clock.advance(600)
    assert len(await svc.tick()) == 1


async def test_overlap_cancel_previous_cancels_the_previous_flow_run(bus: Bus) -> None:
    clock = ManualClock()
    svc = await defined(bus, "canceller", clock, overlap="cancel_previous")
    [first] = await svc.tick()
    clock.advance(600)
    [second] = await svc.tick()
    assert second != first
    [(cancelled_id, cancel)] = await flow_events(bus, "cancel_requested")
    assert cancelled_id == first
    assert isinstance(cancel, FlowCancelRequested)
    assert (cancel.reason, cancel.requested_by) == (SUPERSEDED, "schedule:canceller")
