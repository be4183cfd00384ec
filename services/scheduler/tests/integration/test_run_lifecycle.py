"""Cancellation at every stage, heartbeats, deadlines and dead runtimes, on a real NATS."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

from nexus_events.events import (
    CancelRequested,
    RunCancelled,
    RunConfig,
    RunHeartbeat,
    RunStarted,
)
from nexus_events.runtime.clock import ManualClock
from nexus_events.transport.bus import Bus
from nexus_scheduler.app import SchedulerApp
from nexus_scheduler.runtime.base import RunHandle, RuntimeState
from nexus_scheduler.runtime.local import LocalProcessRuntime

from tests.support.noop_runtime import NoopRuntime

from ..factories import config
from ..waiting import eventually
from .conftest import AppFactory, events_by_run, publish, publish_prepared, run_events

FAKE_RUNNER = Path(__file__).parent.parent / "fake_runner.py"


async def has_event(bus: Bus, run_id: str, name: str) -> bool:
    return name in (await events_by_run(bus)).get(run_id, [])


def service(app: SchedulerApp):  # type: ignore[no-untyped-def]
    assert app.service is not None
    return app.service


async def test_cancel_before_prepared_is_applied_on_arrival(make_app: AppFactory, bus: Bus) -> None:
    runtime = NoopRuntime()
    await make_app(runtime)
    await publish(bus, "early", CancelRequested(requested_by="alice"))
    await publish_prepared(bus, [config("early")])
    await eventually(lambda: has_event(bus, "early", "cancelled"), what="cancelled")
    assert (await events_by_run(bus))["early"] == ["cancel_requested", "prepared", "cancelled"]
    [(_, ev)] = await run_events(bus, "cancelled")
    assert isinstance(ev, RunCancelled)
    assert ev.cancelled_by == "alice"
    assert runtime.start_calls == []


async def test_cancel_of_queued_run_removes_it_from_the_queue(
    make_app: AppFactory, bus: Bus
) -> None:
    runtime = NoopRuntime()
    app = await make_app(runtime, max_concurrent_runs=1)
    await publish_prepared(bus, [config("a"), config("b"), config("c")])
    await eventually(lambda: has_event(bus, "c", "queued"), what="c queued")
    await publish(bus, "b", CancelRequested())
    await eventually(lambda: has_event(bus, "b", "cancelled"), what="b cancelled")
    assert service(app).state.queue() == ["c"]
    await publish(bus, "a", RunCancelled())  # a's runner stops on its own
    await eventually(lambda: has_event(bus, "c", "dispatched"), what="c dispatched")
    assert runtime.start_calls == ["a", "c"]
    assert runtime.cancelled == []


async def test_cancel_of_running_run_cooperative(
    make_app: AppFactory, bus: Bus, clock: ManualClock
) -> None:
    runtime = NoopRuntime()
    app = await make_app(runtime)
    await publish_prepared(bus, [config("r")])
    await eventually(lambda: has_event(bus, "r", "dispatched"))
    await publish(bus, "r", RunStarted())
    await publish(bus, "r", CancelRequested())
    await publish(bus, "r", RunCancelled(message="runner stopped cleanly"))
    await eventually(lambda: _true(not service(app).state.runs), what="run ended")
    clock.advance(3600)
    await service(app).tick()
    assert runtime.cancelled == []  # no escalation needed
    assert [e.message for _, e in await run_events(bus, "cancelled")] == ["runner stopped cleanly"]


async def test_cancel_of_running_run_escalates_after_grace(
    make_app: AppFactory, bus: Bus, clock: ManualClock
) -> None:
    runtime = NoopRuntime()
    app = await make_app(runtime, cancel_grace_seconds=30)
    await publish_prepared(bus, [config("r")])
    await eventually(lambda: has_event(bus, "r", "dispatched"))
    await publish(bus, "r", RunStarted())
    await publish(bus, "r", CancelRequested(requested_by="bob"))
    svc = service(app)
    await eventually(lambda: _true(svc.state.runs["r"].cancel is not None), what="cancel seen")
    clock.advance(29)
    await svc.tick()
    assert runtime.cancelled == []
    clock.advance(2)
    await svc.tick()
    assert runtime.cancelled == ["r"]
    [(_, ev)] = await run_events(bus, "cancelled")
    assert isinstance(ev, RunCancelled)
    assert ev.cancelled_by == "bob"
    assert svc.state.active_total == 0


async def test_cancel_while_dispatching_waits_for_the_start(
    make_app: AppFactory, bus: Bus, clock: ManualClock
) -> None:
    import asyncio

    gate = asyncio.Event()

    class SlowRuntime(NoopRuntime):
        async def start_run(self, config: RunConfig) -> RunHandle:
            await gate.wait()
            return await super().start_run(config)

    runtime = SlowRuntime()
    app = await make_app(runtime, cancel_grace_seconds=10)
    await publish_prepared(bus, [config("r")])
    svc = service(app)
    await eventually(lambda: _true("r" in svc.state.runs), what="prepared seen")
    await publish(bus, "r", CancelRequested())
    await eventually(lambda: _true(svc.state.runs["r"].cancel is not None), what="cancel seen")
    gate.set()
    await eventually(lambda: has_event(bus, "r", "dispatched"))
    clock.advance(11)
    await svc.tick()
    assert runtime.cancelled == ["r"]
    assert (await events_by_run(bus))["r"][-1] == "cancelled"


async def test_missing_heartbeats_mark_the_run_lost_and_free_the_slot(
    make_app: AppFactory, bus: Bus, clock: ManualClock
) -> None:
    runtime = NoopRuntime()
    app = await make_app(runtime, max_concurrent_runs=1, heartbeat_timeout_seconds=60)
    await publish_prepared(bus, [config("r"), config("next")])
    await eventually(lambda: has_event(bus, "r", "dispatched"))
    await publish(bus, "r", RunStarted())
    svc = service(app)
    await eventually(lambda: _true(svc.state.runs["r"].phase == "running"), what="running")
    clock.advance(50)
    await publish(bus, "r", RunHeartbeat(seq=1))
    await eventually(lambda: _true(svc.state.runs["r"].last_seen == clock.now()), what="beat")
    clock.advance(60)
    await svc.tick()
    assert await run_events(bus, "lost") == []
    clock.advance(1)
    await svc.tick()
    [(rid, lost)] = await run_events(bus, "lost")
    assert (rid, lost.reason) == ("r", "heartbeat_missing")  # type: ignore[attr-defined]
    assert runtime.cancelled == ["r"]  # a hung runner is stopped, not left holding resources
    await eventually(lambda: has_event(bus, "next", "dispatched"), what="slot freed")


async def test_wall_clock_deadline_times_out_and_stops_the_runtime(
    make_app: AppFactory, bus: Bus, clock: ManualClock
) -> None:
    runtime = NoopRuntime()
    app = await make_app(runtime, heartbeat_timeout_seconds=10_000)
    await publish_prepared(bus, [config("r", wall_seconds=120)])
    await eventually(lambda: has_event(bus, "r", "dispatched"))
    svc = service(app)
    clock.advance(119)
    await svc.tick()
    assert await run_events(bus, "timed_out") == []
    clock.advance(1)
    await svc.tick()
    [(_, ev)] = await run_events(bus, "timed_out")
    assert ev.limit_seconds == 120  # type: ignore[attr-defined]
    assert ev.reason == "deadline_exceeded"  # type: ignore[attr-defined]
    assert runtime.cancelled == ["r"]


async def test_runtime_start_failure_fails_the_run(make_app: AppFactory, bus: Bus) -> None:
    class BrokenRuntime(NoopRuntime):
        async def start_run(self, config: RunConfig) -> RunHandle:
            raise OSError("no capacity")

    await make_app(BrokenRuntime())
    await publish_prepared(bus, [config("r")])
    await eventually(lambda: has_event(bus, "r", "failed"))
    [(_, ev)] = await run_events(bus, "failed")
    assert ev.reason == "runtime_error"  # type: ignore[attr-defined]
    assert "no capacity" in ev.message  # type: ignore[attr-defined]


async def test_killed_local_runner_is_lost_within_the_window(
    make_app: AppFactory, bus: Bus, clock: ManualClock, tmp_path: Path
) -> None:
    runtime = LocalProcessRuntime(
        tmp_path / "runs",
        command=(sys.executable, str(FAKE_RUNNER)),
        env={"FAKE_RUNNER_MODE": "sleep"},
    )
    app = await make_app(runtime, exit_grace_seconds=5)
    await publish_prepared(bus, [config("r")])
    await eventually(lambda: has_event(bus, "r", "dispatched"))
    [(_, dispatched)] = await run_events(bus, "dispatched")
    pid = int(dispatched.handle)  # type: ignore[attr-defined]
    assert dispatched.runtime == "local"  # type: ignore[attr-defined]
    os.killpg(pid, signal.SIGKILL)

    async def exited() -> bool:
        return (await runtime.status("r")).state is RuntimeState.EXITED

    await eventually(exited, what="process exit noticed")
    svc = service(app)
    await svc.tick()  # notices the exit; waits exit_grace for the runner's own terminal event
    assert await run_events(bus, "lost") == []
    clock.advance(5)
    await svc.tick()
    [(_, lost)] = await run_events(bus, "lost")
    assert lost.reason == "runtime_gone"  # type: ignore[attr-defined]
    assert "SIGKILL" in lost.message  # type: ignore[attr-defined]
    # max_attempts 1: no attempt after it, and the message says the attempts are spent
    assert lost.message.startswith("runner lost after 1 of 1 attempts")  # type: ignore[attr-defined]
    assert await run_events(bus, "resuming") == []


async def _true(value: bool) -> bool:
    return value
