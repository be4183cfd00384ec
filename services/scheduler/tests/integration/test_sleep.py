"""Sleep on a real NATS (issue 42, docs/resume.md "Sleep"): a run whose attempt published
`sleeping` gives its slot to the run behind it; it wakes at its wake time, on
`wake_requested` or on a message on its inbox, as attempt 2 with `resuming` (reason `woke`)
and `config.wake` carrying why, exactly once, also across a scheduler killed during the
sleep; a cancel of a sleeping run ends it at once."""

from __future__ import annotations

from datetime import timedelta

from nexus_events.contract import subjects
from nexus_events.events import (
    CancelRequested,
    InboxMessage,
    RunCancelled,
    RunCompleted,
    RunResuming,
    RunSleeping,
    RunStarted,
    RunWakeRequested,
    WakeCause,
)
from nexus_events.runtime.clock import ManualClock
from nexus_events.transport.bus import Bus
from nexus_scheduler.admission import Phase
from nexus_scheduler.app import SchedulerApp
from nexus_scheduler.metrics import SLEEPING, WAKES, SchedulerMetrics
from nexus_scheduler.service import SchedulerService
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from tests.support.noop_runtime import NoopRuntime

from ..factories import config
from ..waiting import eventually
from .conftest import AppFactory, publish, publish_prepared, run_events
from .test_restart import crash


def service(app: SchedulerApp) -> SchedulerService:
    assert app.service is not None
    return app.service


async def _true(value: bool) -> bool:
    return value


async def resumings(bus: Bus, run_id: str = "r") -> list[RunResuming]:
    return [e for r, e in await run_events(bus, "resuming") if r == run_id]  # type: ignore[misc]


async def asleep(
    make_app: AppFactory, bus: Bus, clock: ManualClock, runtime: NoopRuntime, seconds: float = 5
) -> SchedulerApp:
    """A scheduler with one slot, run `r` asleep in it for `seconds` and run `next` queued
    behind it, then dispatched into the slot `r` gave back."""
    app = await make_app(runtime, max_concurrent_runs=1)
    svc = service(app)
    await publish_prepared(bus, [config("r", max_attempts=1), config("next")])
    await eventually(lambda: _true(runtime.started == ["r"]), what="r dispatched")
    await publish(bus, "r", RunStarted())
    until = clock.now() + timedelta(seconds=seconds)
    await publish(bus, "r", RunSleeping(until=until, reason="waiting for CI", attempt=1, turn=3))
    await eventually(lambda: _true(runtime.started == ["r", "next"]), what="next takes the slot")
    assert svc.state.runs["r"].phase is Phase.SLEEPING
    assert svc.state.active_total == 1
    return app


async def test_a_sleeping_run_frees_its_slot_and_wakes_at_its_time_once(
    make_app: AppFactory, bus: Bus, clock: ManualClock
) -> None:
    runtime = NoopRuntime()
    app = await asleep(make_app, bus, clock, runtime)
    svc = service(app)
    runtime.finish("r")  # the runner exited after `sleeping`: not a loss
    await svc.tick()
    clock.advance(4)
    await svc.tick()
    assert await resumings(bus) == []  # not yet
    assert await run_events(bus, "lost") == []

    clock.advance(1)
    await svc.tick()
    await svc.tick()  # a second tick (or a racing signal) wakes nothing more
    await publish(bus, "r", RunWakeRequested(reason="too late", requested_by="ann"))
    [resuming] = await eventually(lambda: resumings(bus), what="resuming")
    assert (resuming.attempt, resuming.reason) == (2, "woke")
    assert resuming.wake is not None
    assert resuming.wake.cause is WakeCause.TIMER
    assert resuming.wake.sleep_reason == "waiting for CI"
    # The slot is `next`'s: the woken run waits for it, as a queued run does.
    assert runtime.started == ["r", "next"]
    assert svc.state.runs["r"].phase is Phase.QUEUED

    await publish(bus, "next", RunCompleted())
    await eventually(lambda: _true(runtime.started == ["r", "next", "r"]), what="attempt 2")
    woken = runtime.configs[-1]
    assert woken.attempt == 2
    assert woken.wake == resuming.wake
    # max_attempts is 1: the attempt that slept did not count against it.
    assert svc.state.runs["r"].attempts_spent == 1
    await svc.tick()
    assert len(await resumings(bus)) == 1


async def test_wake_requested_wakes_a_sleeping_run_now_and_nothing_else(
    make_app: AppFactory, bus: Bus, clock: ManualClock
) -> None:
    runtime = NoopRuntime()
    app = await make_app(runtime, max_concurrent_runs=2)
    svc = service(app)
    reader = InMemoryMetricReader()
    svc.attach_metrics(SchedulerMetrics(MeterProvider(metric_readers=[reader])))
    await publish_prepared(bus, [config("r"), config("awake")])
    await eventually(lambda: _true(len(runtime.started) == 2), what="both dispatched")
    # A wake for a run that does not sleep changes nothing, also once it sleeps later.
    await publish(bus, "awake", RunWakeRequested(reason="hey"))
    await publish(bus, "r", RunWakeRequested(reason="early"))
    until = clock.now() + timedelta(hours=1)
    await publish(bus, "r", RunSleeping(until=until, reason="deploy", attempt=1, turn=1))
    await eventually(lambda: _true(svc.state.runs["r"].phase is Phase.SLEEPING), what="asleep")
    await svc.tick()
    assert await resumings(bus) == []
    assert _points(reader, SLEEPING) == [({}, 1)]

    await publish(bus, "r", RunWakeRequested(reason="CI is green", requested_by="ann"))
    [resuming] = await eventually(lambda: resumings(bus), what="woken by the signal")
    assert resuming.wake is not None
    assert (resuming.wake.cause, resuming.wake.text) == (WakeCause.SIGNAL, "CI is green")
    assert resuming.wake.requested_by == "ann"
    assert resuming.wake.slept_until == until
    await eventually(lambda: _true(runtime.configs[-1].attempt == 2), what="attempt 2")
    assert runtime.configs[-1].wake == resuming.wake
    assert await resumings(bus, "awake") == []
    assert svc.stats.woken == {"signal": 1}
    assert _points(reader, WAKES) == [({"cause": "signal"}, 1)]
    assert _points(reader, SLEEPING) == [({}, 0)]


def _points(reader: InMemoryMetricReader, name: str) -> list[tuple[dict[str, object], int]]:
    data = reader.get_metrics_data()
    assert data is not None
    return [
        (dict(p.attributes or {}), int(p.value))
        for m in data.resource_metrics[0].scope_metrics[0].metrics
        if m.name == name
        for p in m.data.data_points  # type: ignore[union-attr]
    ]


async def test_a_message_on_its_inbox_wakes_a_sleeping_run(
    make_app: AppFactory, bus: Bus, clock: ManualClock
) -> None:
    runtime = NoopRuntime()
    app = await make_app(runtime)
    svc = service(app)
    await publish_prepared(bus, [config("r")])
    await eventually(lambda: _true(runtime.started == ["r"]), what="dispatched")
    # Sent while it was awake: its runner's business, not a wake.
    await bus.publish(subjects.inbox("r"), InboxMessage(text="before", sender="bob"))
    until = clock.now() + timedelta(hours=1)
    await publish(bus, "r", RunSleeping(until=until, reason="", attempt=1, turn=1))
    await eventually(lambda: _true(svc.state.runs["r"].phase is Phase.SLEEPING), what="asleep")
    await svc.tick()
    assert await resumings(bus) == []

    await bus.publish(subjects.inbox("r"), InboxMessage(text="review done", sender="bob"))
    [resuming] = await eventually(lambda: resumings(bus), what="woken by the message")
    assert resuming.wake is not None
    assert resuming.wake.cause is WakeCause.MESSAGE
    assert (resuming.wake.text, resuming.wake.requested_by) == ("review done", "bob")


async def test_a_cancel_ends_a_sleeping_run_at_once(
    make_app: AppFactory, bus: Bus, clock: ManualClock
) -> None:
    runtime = NoopRuntime()
    await asleep(make_app, bus, clock, runtime, seconds=3600)
    await publish(bus, "r", CancelRequested(requested_by="ann"))
    [(_, cancelled)] = await eventually(lambda: run_events(bus, "cancelled"), what="cancelled")
    assert isinstance(cancelled, RunCancelled)
    assert cancelled.cancelled_by == "ann"
    assert ("r", 1) not in runtime.cancelled_attempts  # nothing ran to stop
    assert await resumings(bus) == []


async def test_a_scheduler_killed_during_the_sleep_leaves_the_next_one_to_wake_it_once(
    make_app: AppFactory, bus: Bus, clock: ManualClock
) -> None:
    first = await asleep(make_app, bus, clock, NoopRuntime(), seconds=5)
    await crash(first)

    runtime = NoopRuntime()
    second = await make_app(runtime, max_concurrent_runs=1)
    svc = service(second)
    entry = svc.state.runs["r"]
    assert entry.phase is Phase.SLEEPING  # rebuilt from NEXUS_RUNS
    assert entry.sleep is not None
    assert entry.sleep.reason == "waiting for CI"
    # The slot is still `next`'s (re-adopted or not, it is not the sleeping run's).
    assert "r" not in svc.state.waiting
    await svc.tick()
    assert await resumings(bus) == []

    clock.advance(5)
    await svc.tick()
    await svc.tick()
    [resuming] = await eventually(lambda: resumings(bus), what="woken")
    assert resuming.wake is not None
    assert resuming.wake.cause is WakeCause.TIMER
    await publish(bus, "next", RunCompleted())
    await eventually(lambda: _true("r" in runtime.started), what="attempt 2 dispatched")
    assert runtime.configs[-1].attempt == 2
    assert len(await resumings(bus)) == 1


async def test_a_runner_gone_before_its_sleeping_is_folded_is_not_lost(
    make_app: AppFactory, bus: Bus, clock: ManualClock
) -> None:
    runtime = NoopRuntime()
    app = await make_app(runtime, max_concurrent_runs=1)
    svc = service(app)
    await publish_prepared(bus, [config("r", max_attempts=2)])
    await eventually(lambda: _true(runtime.started == ["r"]), what="dispatched")
    await publish(bus, "r", RunStarted())
    await eventually(lambda: _true(svc.state.runs["r"].phase is Phase.RUNNING), what="running")
    # The consumer lags (stopped here): the runtime reports the process ended before the
    # scheduler has folded the attempt's `sleeping`.
    assert app._consumer is not None
    await app._consumer.stop()
    until = clock.now() + timedelta(hours=1)
    await publish(bus, "r", RunSleeping(until=until, reason="CI", attempt=1, turn=2))
    runtime.finish("r")
    await svc.tick()
    clock.advance(5)  # past the exit grace
    await svc.tick()
    assert svc.state.runs["r"].phase is Phase.SLEEPING  # found in NEXUS_RUNS
    assert await resumings(bus) == []
    assert await run_events(bus, "lost") == []
    assert runtime.started == ["r"]
