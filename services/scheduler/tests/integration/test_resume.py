"""Attempts on a real NATS (issue 24): a runner killed with SIGKILL is resumed as attempt 2 with
the same config, keeping its slot; past `max_attempts` the run ends lost with the reason; a
scheduler that stops between `resuming` and `dispatched` leaves the next leader to start the
attempt, once; a cancel pending then wins."""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path

import pytest
from nexus_events.events import (
    CancelRequested,
    RunDispatched,
    RunHeartbeat,
    RunLost,
    RunResuming,
    RunStarted,
)
from nexus_events.runtime.clock import ManualClock
from nexus_events.transport.bus import Bus
from nexus_scheduler.app import SchedulerApp
from nexus_scheduler.metrics import ATTEMPTS_EXHAUSTED, RESUMES, SchedulerMetrics
from nexus_scheduler.runtime.base import RuntimeState
from nexus_scheduler.runtime.local import LocalProcessRuntime
from nexus_scheduler.runtime.sessions import proc_stat
from nexus_scheduler.service import SchedulerService
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from tests.support.noop_runtime import NoopRuntime

from ..factories import config
from ..waiting import eventually
from .conftest import AppFactory, events_by_run, publish, publish_prepared, run_events

FAKE_RUNNER = Path(__file__).parent.parent / "fake_runner.py"

pytestmark = pytest.mark.skipif(not Path("/proc").is_dir(), reason="needs /proc (Linux)")


def service(app: SchedulerApp) -> SchedulerService:
    assert app.service is not None
    return app.service


def alive(pid: int) -> bool:
    st = proc_stat(pid)
    return st is not None and st.state not in ("Z", "X")


async def _dispatched(bus: Bus, run_id: str, attempt: int) -> RunDispatched | None:
    for rid, ev in await run_events(bus, "dispatched"):
        if rid == run_id and isinstance(ev, RunDispatched) and ev.attempt == attempt:
            return ev
    return None


async def _kill_and_notice(
    runtime: LocalProcessRuntime, svc: SchedulerService, clock: ManualClock, pid: int, attempt: int
) -> None:
    """SIGKILL the runner's group, then tick past the exit grace (5 s)."""
    os.killpg(pid, signal.SIGKILL)

    async def exited() -> bool:
        return (await runtime.status("r", attempt=attempt)).state is RuntimeState.EXITED

    await eventually(exited, what=f"attempt {attempt}'s exit noticed")
    await svc.tick()  # notices the exit; waits the exit grace for the runner's own ending
    clock.advance(5)
    await svc.tick()


async def test_a_killed_runner_is_resumed_as_attempt_2_then_lost_past_max_attempts(
    make_app: AppFactory, bus: Bus, clock: ManualClock, tmp_path: Path
) -> None:
    runtime = LocalProcessRuntime(
        tmp_path / "runs",
        command=(sys.executable, str(FAKE_RUNNER)),
        env={"FAKE_RUNNER_MODE": "sleep"},
        kill_grace=2,
    )
    app = await make_app(runtime, exit_grace_seconds=5, max_concurrent_runs=1)
    svc = service(app)
    reader = InMemoryMetricReader()
    svc.metrics = SchedulerMetrics(MeterProvider(metric_readers=[reader]))
    cfg = config("r", max_attempts=2)
    await publish_prepared(bus, [cfg, config("next")])
    first = await eventually(lambda: _dispatched(bus, "r", 1), what="attempt 1")
    pid1 = int(first.handle)
    await publish(bus, "r", RunStarted())
    await eventually(lambda: _true(svc.state.runs["r"].phase == "running"), what="running")

    await _kill_and_notice(runtime, svc, clock, pid1, attempt=1)

    [(_, resuming)] = await run_events(bus, "resuming")
    assert isinstance(resuming, RunResuming)
    assert (resuming.attempt, resuming.reason) == (2, "runtime_gone")
    assert "SIGKILL" in resuming.message
    second = await _dispatched(bus, "r", 2)
    assert second is not None
    assert second.runtime == "local"
    pid2 = int(second.handle)
    assert pid2 != pid1
    assert alive(pid2)
    # the same config, as attempt 2, in the run's own dir
    written = json.loads((runtime.run_dir("r") / "config.json").read_text())
    assert written == {**json.loads(cfg.model_dump_json()), "attempt": 2}
    assert (await runtime.status("r", attempt=2)).state is RuntimeState.RUNNING
    assert (runtime.run_dir("r") / "runner-a2.pid").exists()
    # the slot was kept: the run behind it still waits, and `r` was never queued again
    events = await events_by_run(bus)
    assert "dispatched" not in events["next"]
    assert "queued" not in events["r"]
    assert svc.state.active_total == 1
    assert svc.stats.resumed == {"runtime_gone": 1}

    await _kill_and_notice(runtime, svc, clock, pid2, attempt=2)

    [(_, lost)] = await run_events(bus, "lost")
    assert isinstance(lost, RunLost)
    assert lost.reason == "runtime_gone"
    assert lost.message.startswith("runner lost after 2 of 2 attempts: ")
    assert "SIGKILL" in lost.message
    assert len(await run_events(bus, "resuming")) == 1
    assert svc.stats.attempts_exhausted == 1
    assert counters(reader) == {
        RESUMES: [({"reason": "runtime_gone", "attempt": 2}, 1)],
        ATTEMPTS_EXHAUSTED: [({"reason": "runtime_gone"}, 1)],
    }
    nxt = await eventually(lambda: _dispatched(bus, "next", 1), what="the slot freed at last")
    # Its runner sleeps: stop it, or it outlives the test (the runtime's close leaves runners
    # running for the next scheduler to adopt) and warns when its handle is collected.
    await runtime.cancel_run("next")
    assert not alive(int(nxt.handle))


async def test_a_restart_between_resuming_and_dispatched_starts_the_attempt_once(
    make_app: AppFactory, bus: Bus
) -> None:
    """The leader that published `resuming` stopped before the start: the next one starts
    that attempt (once, whatever replays), and a run with a cancel pending ends cancelled."""
    await publish_prepared(bus, [config("r", max_attempts=3), config("c", max_attempts=3)])
    for run_id in ("r", "c"):
        await publish(bus, run_id, RunDispatched(runtime="noop", handle=run_id))
        await publish(bus, run_id, RunStarted())
        await publish(bus, run_id, RunResuming(attempt=2, reason="heartbeat_missing"))
    await publish(bus, "c", CancelRequested(requested_by="ops"))

    runtime = NoopRuntime()
    app = await make_app(runtime)
    second = await eventually(lambda: _dispatched(bus, "r", 2), what="attempt 2 dispatched")
    assert second.attempt == 2
    assert [(c.run_id, c.attempt) for c in runtime.configs] == [("r", 2)]
    assert ("r", 1) in runtime.cancelled_attempts  # the old attempt stopped first
    await eventually(lambda: _has(bus, "c", "cancelled"), what="the cancel wins")
    assert await _dispatched(bus, "c", 2) is None

    # Another leader after it finds attempt 2 dispatched: nothing is started again.
    await app.stop()
    again = NoopRuntime()  # its runtime still runs attempt 2
    await again.start_run(config("r", max_attempts=3).model_copy(update={"attempt": 2}))
    again.start_calls.clear()
    app2 = await make_app(again)
    await service(app2).tick()
    assert again.start_calls == []
    assert len([e for r, e in await run_events(bus, "dispatched") if r == "r"]) == 2
    assert len(await run_events(bus, "resuming")) == 2  # r's and c's, never re-published
    assert service(app2).state.runs["r"].attempt == 2


async def test_missing_heartbeats_resume_the_run_and_the_deadline_spans_the_attempts(
    make_app: AppFactory, bus: Bus, clock: ManualClock
) -> None:
    runtime = NoopRuntime()
    app = await make_app(runtime, heartbeat_timeout_seconds=60)
    svc = service(app)
    await publish_prepared(bus, [config("r", max_attempts=2, wall_seconds=300)])
    await eventually(lambda: _dispatched(bus, "r", 1), what="attempt 1")
    await publish(bus, "r", RunStarted())
    await eventually(lambda: _true(svc.state.runs["r"].phase == "running"), what="running")
    clock.advance(61)
    await svc.tick()
    [(_, resuming)] = await run_events(bus, "resuming")
    assert (resuming.attempt, resuming.reason) == (2, "heartbeat_missing")  # type: ignore[attr-defined]
    assert runtime.cancelled_attempts == [("r", 1)]  # a hung runner must not go on
    assert [(c.run_id, c.attempt) for c in runtime.configs] == [("r", 1), ("r", 2)]
    assert runtime.configs[1] == runtime.configs[0].model_copy(update={"attempt": 2})
    assert await _dispatched(bus, "r", 2) is not None
    await publish(bus, "r", RunStarted(runner="attempt-2"))  # same body: deduplicated
    await eventually(lambda: _true(svc.state.runs["r"].phase == "running"), what="attempt 2")
    clock.advance(238)  # 299 s after the first dispatch, 238 s into attempt 2
    await publish(bus, "r", RunHeartbeat(seq=1))
    await eventually(lambda: _true(svc.state.runs["r"].last_seen == clock.now()), what="beat")
    await svc.tick()
    assert await run_events(bus, "timed_out") == []
    clock.advance(1)
    await svc.tick()
    [(_, timed_out)] = await run_events(bus, "timed_out")
    assert timed_out.limit_seconds == 300  # type: ignore[attr-defined]
    assert runtime.cancelled_attempts[-1] == ("r", 2)


def counters(reader: InMemoryMetricReader) -> dict[str, list[tuple[dict[str, object], int]]]:
    data = reader.get_metrics_data()
    assert data is not None
    return {
        m.name: [(dict(p.attributes or {}), p.value) for p in m.data.data_points]  # type: ignore[attr-defined]
        for rm in data.resource_metrics
        for sm in rm.scope_metrics
        for m in sm.metrics
    }


async def _has(bus: Bus, run_id: str, name: str) -> bool:
    return name in (await events_by_run(bus)).get(run_id, [])


async def _true(value: bool) -> bool:
    return value


async def test_a_killed_warm_runner_is_resumed_as_attempt_2_started_cold(
    make_app: AppFactory, bus: Bus, clock: ManualClock, tmp_path: Path
) -> None:
    """A run handed to a warm runner (docs/warm-starts.md) whose runner is killed -9 resumes
    as any run: attempt 2, started cold in the run's dir (the warm runner's slot)."""
    runtime = LocalProcessRuntime(
        tmp_path / "runs",
        command=(sys.executable, str(FAKE_RUNNER)),
        env={"FAKE_RUNNER_MODE": "sleep"},
        kill_grace=2,
        warm_pool={"default": 1},
    )
    app = await make_app(runtime, exit_grace_seconds=5)
    svc = service(app)
    await publish_prepared(bus, [config("learn")])  # the pool learns the agent's shape
    await eventually(lambda: _dispatched(bus, "learn", 1), what="the first run")
    assert runtime.warm is not None
    await eventually(lambda: _true(runtime.warm.pool.idle_count == 1), what="a warm runner")  # type: ignore[union-attr]
    [warm] = runtime.warm.pool.idle["implementer"]
    await publish_prepared(bus, [config("r", max_attempts=2)])
    first = await eventually(lambda: _dispatched(bus, "r", 1), what="attempt 1")
    assert int(first.handle) == warm.proc.pid  # served warm
    await publish(bus, "r", RunStarted())
    await eventually(lambda: _true(svc.state.runs["r"].phase == "running"), what="running")

    await _kill_and_notice(runtime, svc, clock, warm.proc.pid, attempt=1)

    [(_, resuming)] = await run_events(bus, "resuming")
    assert isinstance(resuming, RunResuming)
    assert (resuming.attempt, resuming.reason) == (2, "runtime_gone")
    second = await eventually(lambda: _dispatched(bus, "r", 2), what="attempt 2")
    assert int(second.handle) != warm.proc.pid
    assert (warm.slot / "runner-a2.pid").exists()  # cold, in the run's dir: the slot
    assert json.loads((warm.slot / "config.json").read_text())["attempt"] == 2
    assert (await runtime.status("r", attempt=2)).state is RuntimeState.RUNNING
    for run_id, attempt in (("r", 2), ("learn", 1)):
        await runtime.cancel_run(run_id, attempt)
    assert not alive(int(second.handle))
