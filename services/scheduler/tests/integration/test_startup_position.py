"""A fresh scheduler durable starts where the start-up replay ended (ConsumerSpec.start_seq);
an existing durable keeps its position across a restart."""

from __future__ import annotations

from nats.js.api import DeliverPolicy
from nexus_events.contract import subjects
from nexus_events.contract.streams import RUNS, SCHEDULES
from nexus_events.events import RunCompleted, ScheduleDefined
from nexus_events.runtime.clock import ManualClock
from nexus_events.transport.bus import Bus

from ..factories import config
from ..waiting import eventually
from .conftest import AppFactory, _true, publish, publish_prepared, run_events


async def test_new_durables_start_after_the_replay_and_existing_ones_keep_position(
    make_app: AppFactory, bus: Bus, clock: ManualClock
) -> None:
    # History before the first start: 20 finished runs, 1 waiting run, 1 schedule.
    await publish_prepared(bus, [config(f"old-{i}") for i in range(20)])
    for i in range(20):
        await publish(bus, f"old-{i}", RunCompleted())
    await publish_prepared(bus, [config("waiting")])
    await bus.publish(
        subjects.schedule_event("s1", "defined"),
        ScheduleDefined(agent_id="a", interval_seconds=3600),
    )
    runs_last = (await bus.js.stream_info(RUNS)).state.last_seq
    schedules_last = (await bus.js.stream_info(SCHEDULES)).state.last_seq

    app = await make_app(consumer_name="sched")
    # The waiting run was known from the replay alone and is dispatched.
    await eventually(lambda: _dispatched(bus, "waiting"), what="waiting run dispatched")
    info = await bus.js.consumer_info(RUNS, "sched")
    assert info.config.deliver_policy == DeliverPolicy.BY_START_SEQUENCE
    assert info.config.opt_start_seq == runs_last + 1
    sched_info = await bus.js.consumer_info(SCHEDULES, "sched-schedules")
    assert sched_info.config.opt_start_seq == schedules_last + 1
    assert app.schedules is not None
    assert "s1" in app.schedules.schedules

    # Only what came after the replay is delivered (the scheduler's own `dispatched` of the
    # waiting run, then the new run's `prepared` and `dispatched`), never the 41 replayed.
    await publish_prepared(bus, [config("new")])
    await eventually(lambda: _dispatched(bus, "new"), what="new run dispatched")
    await eventually(lambda: _delivered(bus, 3), what="consumer caught up")
    assert (await bus.js.consumer_info(RUNS, "sched")).delivered.consumer_seq == 3
    await app.stop()

    # Events published while no scheduler runs are read by the existing durable, which keeps
    # its start position and its progress: nothing is delivered twice.
    await publish(bus, "new", RunCompleted())
    await bus.publish(
        subjects.schedule_event("s2", "defined"),
        ScheduleDefined(agent_id="a", interval_seconds=3600),
    )
    second = await make_app(consumer_name="sched")
    await eventually(lambda: _true(second.leading.is_set()), what="leading again")
    info = await bus.js.consumer_info(RUNS, "sched")
    assert info.config.opt_start_seq == runs_last + 1
    # The completion, and `lost` for `waiting` (the new process's runtime does not know it,
    # and no heartbeat came within the window).
    assert second.service is not None
    clock.advance(91)
    service = second.service

    async def lost() -> bool:
        # Ticked until the run is lost: leading comes before the new process has read
        # `waiting` back, and a tick before that finds nothing to decide.
        await service.tick()
        return await _has(bus, "waiting", "lost")

    await eventually(lost, what="waiting run lost")
    await eventually(lambda: _delivered(bus, 5), what="caught up again")
    info = await bus.js.consumer_info(RUNS, "sched")
    # Exactly the events after the first replay, each once.
    after_replay = (await bus.js.stream_info(RUNS)).state.last_seq - runs_last
    assert info.delivered.consumer_seq == after_replay == 5
    assert info.num_redelivered == 0
    assert second.schedules is not None
    assert "s2" in second.schedules.schedules
    assert (await bus.js.consumer_info(SCHEDULES, "sched-schedules")).delivered.consumer_seq == 1


async def _dispatched(bus: Bus, run_id: str) -> bool:
    return any(rid == run_id for rid, _ in await run_events(bus, "dispatched"))


async def _has(bus: Bus, run_id: str, name: str) -> bool:
    return any(rid == run_id for rid, _ in await run_events(bus, name))


async def _delivered(bus: Bus, n: int) -> bool:
    info = await bus.js.consumer_info(RUNS, "sched")
    return info.delivered.consumer_seq >= n and info.num_ack_pending == 0
