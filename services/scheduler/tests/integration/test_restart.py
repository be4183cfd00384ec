"""A scheduler that dies (no drain) and comes back re-adopts the local runners still alive,
ends only what is really gone, and leaves no process of an ended run behind."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from nexus_events.events import RunCompleted, RunConfig, RunStarted
from nexus_events.runtime.clock import ManualClock
from nexus_events.transport.bus import Bus
from nexus_scheduler.app import SchedulerApp
from nexus_scheduler.runtime.base import RuntimeState
from nexus_scheduler.runtime.local import LocalProcessRuntime
from nexus_scheduler.runtime.sessions import proc_stat, session_members
from nexus_scheduler.service import SchedulerService

from ..factories import config
from ..waiting import eventually
from .conftest import AppFactory, events_by_run, publish, publish_prepared, run_events

FAKE_RUNNER = Path(__file__).parent.parent / "fake_runner.py"
TERMINAL = {"completed", "failed", "cancelled", "timed_out", "lost"}

pytestmark = pytest.mark.skipif(not Path("/proc").is_dir(), reason="needs /proc (Linux)")


def local_runtime(workdir: Path, mode: str = "sleep") -> LocalProcessRuntime:
    return LocalProcessRuntime(
        workdir,
        command=(sys.executable, str(FAKE_RUNNER)),
        kill_grace=3,
        env={"FAKE_RUNNER_MODE": mode},
    )


@pytest.fixture
def pids() -> Iterator[list[int]]:
    """Runner pids (session ids) to kill whatever the test's outcome."""
    started: list[int] = []
    yield started
    for sid in started:
        for pid in session_members(sid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


async def crash(app: SchedulerApp) -> None:
    """What kill -9 leaves: no drain, no lease release, no runtime close."""
    for task in (app._campaign, app._ticker):
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
    for consumer in (app._consumer, app._schedule_consumer, app._inbox_consumer):
        if consumer is not None:
            with contextlib.suppress(Exception):
                await consumer.stop()
    assert app._bus is not None
    await app._bus.nc.close()


def catch_up(clock: ManualClock) -> None:
    """Move the manual clock up to the wall clock. A rebuild dates the events it replays by
    their envelopes (wall-clock time), while the windows are measured on the manual clock:
    without this, a test slowed down by load (the run's `started` stamped seconds after the
    clock was made) saw its heartbeat window end later than the test's last advance."""
    clock.set(max(clock.now(), datetime.now(UTC)))


def service(app: SchedulerApp) -> SchedulerService:
    assert app.service is not None
    return app.service


def alive(pid: int) -> bool:
    st = proc_stat(pid)
    return st is not None and st.state not in ("Z", "X")


async def dispatched_pids(bus: Bus, count: int) -> dict[str, int]:
    async def enough() -> dict[str, int] | None:
        found = {r: int(e.handle) for r, e in await run_events(bus, "dispatched")}  # type: ignore[attr-defined]
        return found if len(found) >= count else None

    return await eventually(enough, what=f"{count} dispatched")


async def ready(runtime: LocalProcessRuntime, run_id: str) -> bool:
    log = runtime.run_dir(run_id) / "runner.log"
    return log.exists() and "ready" in log.read_text()


async def running_then_crashed(
    make_app: AppFactory, bus: Bus, workdir: Path, run_id: str, pids: list[int]
) -> dict[str, int]:
    """A scheduler that dispatched `run_id` (running, as the runner said) and then died
    without draining; the runner's pid by run id."""
    first = await make_app(local_runtime(workdir), heartbeat_timeout_seconds=90)
    await publish_prepared(bus, [config(run_id)])
    handles = await dispatched_pids(bus, 1)
    pids.extend(handles.values())
    await publish(bus, run_id, RunStarted())
    await eventually(lambda: _true(service(first).state.runs[run_id].phase == "running"))
    await crash(first)
    return handles


async def test_restart_re_adopts_live_runs_and_each_ends_once(
    make_app: AppFactory, bus: Bus, clock: ManualClock, tmp_path: Path, pids: list[int]
) -> None:
    workdir = tmp_path / "runs"
    first = await make_app(local_runtime(workdir), heartbeat_timeout_seconds=90)
    ids = ["r1", "r2", "r3"]
    await publish_prepared(bus, [config(r) for r in ids])
    handles = await dispatched_pids(bus, 3)
    pids.extend(handles.values())
    for run_id in ids:
        await publish(bus, run_id, RunStarted())
    await eventually(
        lambda: _true(all(e.phase == "running" for e in service(first).state.runs.values())),
        what="all running",
    )
    await crash(first)

    runtime = local_runtime(workdir)
    second = await make_app(runtime, heartbeat_timeout_seconds=90)
    svc = service(second)
    await svc.tick()
    clock.advance(30)  # well inside the heartbeat window
    await svc.tick()
    assert await run_events(bus, "lost") == []
    for run_id, pid in handles.items():
        assert (await runtime.status(run_id)).state is RuntimeState.RUNNING
        assert alive(pid)

    # The runners finish as they would: their own terminal event, then exit.
    for run_id, pid in handles.items():
        await publish(bus, run_id, RunCompleted())
        os.killpg(pid, signal.SIGTERM)
    await eventually(lambda: _true(not svc.state.runs), what="runs ended")
    for pid in handles.values():
        await eventually(lambda pid=pid: _true(not alive(pid)), what=f"{pid} exited")
    clock.advance(120)
    await svc.tick()
    by_run = await events_by_run(bus)
    for run_id in ids:
        assert [e for e in by_run[run_id] if e in TERMINAL] == ["completed"], by_run[run_id]


async def test_restart_loses_a_run_whose_runner_died_after_the_heartbeat_window(
    make_app: AppFactory, bus: Bus, clock: ManualClock, tmp_path: Path, pids: list[int]
) -> None:
    workdir = tmp_path / "runs"
    handles = await running_then_crashed(make_app, bus, workdir, "dead", pids)
    os.killpg(handles["dead"], signal.SIGKILL)  # dies while no scheduler watches
    await eventually(lambda: _true(not alive(handles["dead"])), what="runner dead")
    catch_up(clock)

    second = await make_app(local_runtime(workdir), heartbeat_timeout_seconds=90)
    svc = service(second)
    await svc.tick()
    clock.advance(60)
    await svc.tick()
    assert await run_events(bus, "lost") == []  # not before the window
    clock.advance(31)
    await svc.tick()
    [(_, lost)] = await run_events(bus, "lost")
    assert lost.reason in ("runtime_gone", "heartbeat_missing")  # type: ignore[attr-defined]


async def test_adopted_runner_is_stopped_when_its_run_is_lost(
    make_app: AppFactory, bus: Bus, clock: ManualClock, tmp_path: Path, pids: list[int]
) -> None:
    workdir = tmp_path / "runs"
    handles = await running_then_crashed(make_app, bus, workdir, "quiet", pids)
    catch_up(clock)

    runtime = local_runtime(workdir)
    second = await make_app(runtime, heartbeat_timeout_seconds=90)
    svc = service(second)
    await svc.tick()
    assert (await runtime.status("quiet")).state is RuntimeState.RUNNING
    clock.advance(91)  # alive, but no heartbeat: the run is lost and its runner must stop
    await svc.tick()
    [(_, lost)] = await run_events(bus, "lost")
    assert lost.reason == "heartbeat_missing"  # type: ignore[attr-defined]
    await eventually(lambda: _true(not alive(handles["quiet"])), what="runner stopped")
    assert session_members(handles["quiet"]) == []


async def test_killed_runner_leaves_no_process_of_its_session(
    make_app: AppFactory, bus: Bus, clock: ManualClock, tmp_path: Path, pids: list[int]
) -> None:
    runtime = local_runtime(tmp_path / "runs", mode="spawn-tool")
    app = await make_app(runtime, exit_grace_seconds=5)
    await publish_prepared(bus, [config("r")])
    handles = await dispatched_pids(bus, 1)
    runner = handles["r"]
    pids.append(runner)
    await eventually(lambda: ready(runtime, "r"), what="tool started")
    # The tool (sh), its `sleep 300 &` and its foreground `sleep 300`.
    left = await kill_runner_with_tools(runtime, "r", runner)
    svc = service(app)
    await svc.tick()
    clock.advance(5)
    await svc.tick()
    [(_, lost)] = await run_events(bus, "lost")
    assert "SIGKILL" in lost.message  # type: ignore[attr-defined]
    for pid in left:
        await eventually(lambda pid=pid: _true(not alive(pid)), what=f"tool process {pid} killed")
    assert session_members(runner) == []


def descendants(pid: int) -> list[int]:
    """Live processes below `pid` in the process tree (by parent pid, from /proc)."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if fields[0] not in ("Z", "X"):
            parents[int(entry.name)] = int(fields[1])
    found: list[int] = []
    frontier = [pid]
    while frontier:
        children = [p for p, parent in parents.items() if parent in frontier]
        found += children
        frontier = children
    return found


async def kill_runner_with_tools(
    runtime: LocalProcessRuntime,
    run_id: str,
    runner: int,
    find: Callable[[int], list[int]] = session_members,
    at_least: int = 3,
) -> list[int]:
    """Once at least `at_least` of the runner's tool processes run (`find`: in its session,
    by default), kill -9 the runner and wait until the runtime sees it exited; their pids."""
    left: list[int] = await eventually(
        lambda: _value([p for p in find(runner) if p != runner], at_least),
        what="tool processes",
    )
    os.kill(runner, signal.SIGKILL)

    async def exited() -> bool:
        return (await runtime.status(run_id)).state is RuntimeState.EXITED

    await eventually(exited, what="runner exit noticed")
    return left


async def _true(value: bool) -> bool:
    return value


async def _value(items: list[int], at_least: int) -> list[int] | None:
    return items if len(items) >= at_least else None


async def test_killed_real_runner_leaves_no_tool_process(
    make_app: AppFactory,
    bus: Bus,
    clock: ManualClock,
    tmp_path: Path,
    nats_url: str,
    pids: list[int],
) -> None:
    """The real `python -m nexus_runner`, whose shell tool leaves a grandchild, is killed -9."""
    from tests.fakes.openai_server import FakeOpenAI, Reply, ToolCall

    command = "sh -c 'sleep 300 & sleep 300'"
    script = [Reply(tool_calls=(ToolCall("run_shell", {"command": command}),))]
    async with FakeOpenAI(script) as llm:
        runtime = LocalProcessRuntime(
            tmp_path / "runs",
            kill_grace=3,
            env={
                "NEXUS_NATS_URL": nats_url,
                "NEXUS_BUDGET_RESERVATIONS": "off",  # no spend service here
                "NEXUS_WORKSPACE_ROOT": str(tmp_path / "workspaces"),
            },
        )
        app = await make_app(runtime, exit_grace_seconds=5)
        body = config("real").model_dump(mode="json")
        body["model"]["base_url"] = llm.base_url
        cfg = RunConfig.model_validate({**body, "tools": ["run_shell", "finish"]})
        await publish_prepared(bus, [cfg])
        runner = (await dispatched_pids(bus, 1))["real"]
        pids.append(runner)
        await eventually(
            lambda: _has_event(bus, "real", "tool_called"), within=30, what="tool called"
        )
        # In the tools' sandbox (bwrap --new-session) the command has a session of its own:
        # bwrap, the sandbox's PID 1, sh and its two sleeps, all below the runner. Killing
        # the runner takes them down (bwrap --die-with-parent, the runtime's session kill).
        left = await kill_runner_with_tools(runtime, "real", runner, descendants, 5)
        for pid in left:
            await eventually(lambda pid=pid: _true(not alive(pid)), what=f"tool process {pid}")
        svc = service(app)
        await svc.tick()
        clock.advance(5)
        await svc.tick()
        [(_, lost)] = await run_events(bus, "lost")
        assert lost.reason == "runtime_gone"  # type: ignore[attr-defined]


async def _has_event(bus: Bus, run_id: str, name: str) -> bool:
    return name in (await events_by_run(bus)).get(run_id, [])
