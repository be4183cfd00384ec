"""Warm runners of the local runtime (docs/warm-starts.md), with the stand-in runner
(fake_runner.py --warm): a run is handed to an idle warm runner of its agent and shape, never
reused; runners dying idle are replaced, busy ones resume cold as attempt 2; a new runtime
adopts busy warm runners and discards idle ones; a burst is refilled; another shape starts
cold."""

from __future__ import annotations

import json
import os
import shutil
import signal
import stat
import sys
from pathlib import Path
from typing import Any

import pytest
from nexus_events.events import RunConfig
from nexus_scheduler.metrics import RUNNER_STARTS, WARM_IDLE, SchedulerMetrics
from nexus_scheduler.runtime.base import RuntimeState
from nexus_scheduler.runtime.confinement import Confinement
from nexus_scheduler.runtime.local import LocalProcessRuntime
from nexus_scheduler.runtime.sessions import proc_stat
from nexus_scheduler.runtime.warm_runners import TAKEN_FILE, WarmRunner
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from ..factories import config
from ..waiting import eventually

FAKE_RUNNER = Path(__file__).parent.parent / "fake_runner.py"

pytestmark = pytest.mark.skipif(not Path("/proc").is_dir(), reason="needs /proc (Linux)")


def runtime(
    tmp_path: Path,
    mode: str,
    sizes: dict[str, int] | None = None,
    *,
    confined: bool = False,
    max_idle: int = 4,
) -> LocalProcessRuntime:
    return LocalProcessRuntime(
        tmp_path / "runs",
        command=(sys.executable, str(FAKE_RUNNER)),
        kill_grace=3,
        env={
            "FAKE_RUNNER_MODE": mode,
            "NEXUS_WORKSPACE_ROOT": str(tmp_path / "workspaces"),
            "NEXUS_NATS_TOKEN": "the-scheduler-s-token",  # a warm runner holds no credential
        },
        credentials=lambda c: {"NEXUS_NATS_PASSWORD": f"pw-{c.run_id}", "NEXUS_NATS_TOKEN": ""},
        confinement=Confinement(shutil.which("bwrap") or "bwrap") if confined else None,
        warm_pool=sizes if sizes is not None else {"default": 1},
        warm_pool_max=max_idle,
    )


def idle(rt: LocalProcessRuntime, agent: str = "implementer") -> list[WarmRunner]:
    assert rt.warm is not None
    return list(rt.warm.pool.idle.get(agent, []))


async def wait_idle(rt: LocalProcessRuntime, count: int, agent: str = "implementer") -> None:
    await eventually(lambda: len(idle(rt, agent)) >= count, within=30, what=f"{count} idle")


async def ended(rt: LocalProcessRuntime, run_id: str, attempt: int = 1) -> int | None:
    status = await eventually(
        lambda: rt.status(run_id, attempt), lambda s: not s.live, within=30, what=f"{run_id} end"
    )
    return status.exit_code  # type: ignore[no-any-return]


def report(rt: LocalProcessRuntime, run_id: str) -> dict[str, Any]:
    return json.loads((rt.run_dir(run_id) / "report.json").read_text())  # type: ignore[no-any-return]


def served_warm(rt: LocalProcessRuntime, run_id: str) -> bool:
    """The run's dir is a warm runner's slot (renamed at the hand-off)."""
    return (rt.run_dir(run_id) / TAKEN_FILE).exists()


def alive(pid: int) -> bool:
    st = proc_stat(pid)
    return st is not None and st.state not in ("Z", "X")


async def test_a_run_is_handed_to_a_warm_runner_with_its_own_env(tmp_path: Path) -> None:
    reader = InMemoryMetricReader()
    rt = runtime(tmp_path, "isolation")
    rt.attach_metrics(SchedulerMetrics(MeterProvider(metric_readers=[reader])))
    await rt.start()
    try:
        first = await rt.start_run(config("first"))  # cold: the pool learns the agent's shape
        assert not served_warm(rt, "first")
        assert not first.warm  # what `dispatched` says of it
        await wait_idle(rt, 1)
        [warm] = idle(rt)
        await eventually(lambda: "warm" in (warm.slot / "runner.log").read_text(), what="warm")
        environ = (Path("/proc") / str(warm.proc.pid) / "environ").read_bytes()
        assert b"NEXUS_NATS_TOKEN" not in environ  # no credential, no run id before the run
        assert b"NEXUS_RUN_ID" not in environ
        handle = await rt.start_run(config("second"))
        assert int(handle.handle) == warm.proc.pid
        assert handle.warm
        assert (await rt.start_run(config("second"))).warm  # adopting it says so again
        run_dir = rt.run_dir("second")
        assert not run_dir.is_symlink()  # the slot, renamed: the run's dir as a cold run's
        assert warm.slot.resolve() == run_dir.resolve()  # the old name links to it
        assert (run_dir / TAKEN_FILE).read_text() == "second"
        assert Path(os.readlink(f"/proc/{warm.proc.pid}/cwd")) == run_dir.resolve()
        cfg = run_dir / "config.json"
        assert stat.S_IMODE(cfg.stat().st_mode) == 0o600
        assert await ended(rt, "second") == 0
        lines = [line async for line in rt.stream_logs("second")]
        assert lines == ["warm", "run second agent implementer", "done"]
        seen = report(rt, "second")
        env = seen["env"]
        assert isinstance(env, dict)
        assert env["NEXUS_RUN_ID"] == "second"
        assert env["NEXUS_NATS_PASSWORD"] == "pw-second"
        assert env["NEXUS_NATS_TOKEN"] == ""  # the run's credential replaced the scheduler's
        assert seen["workspace"] == str(tmp_path / "workspaces" / warm.slot.name)
        assert seen["stdin"] == "/dev/null"
        assert await ended(rt, "first") == 0
    finally:
        await rt.close()
    starts = {
        p.attributes["start"]: p.value
        for m in reader.get_metrics_data().resource_metrics[0].scope_metrics[0].metrics
        if m.name == RUNNER_STARTS
        for p in m.data.data_points  # type: ignore[union-attr]
    }
    assert starts == {"cold": 1, "warm": 1}
    names = [m.name for m in reader.get_metrics_data().resource_metrics[0].scope_metrics[0].metrics]
    assert WARM_IDLE in names


async def test_twenty_runs_on_a_pool_of_two_never_share_a_runner(tmp_path: Path) -> None:
    rt = runtime(tmp_path, "isolation", {"default": 2})
    await rt.start()
    run_ids = [f"r{i:02d}" for i in range(20)]
    try:
        await rt.start_run(config("learn"))
        pids: set[int] = set()
        for run_id in run_ids:
            await wait_idle(rt, 1)
            pids.add(int((await rt.start_run(config(run_id))).handle))
            assert served_warm(rt, run_id)
        for run_id in ["learn", *run_ids]:
            assert await ended(rt, run_id) == 0
    finally:
        await rt.close()
    assert len(pids) == 20
    slots = {p.resolve() for p in (tmp_path / "runs").glob("warm-*")}
    assert slots == {rt.run_dir(r).resolve() for r in run_ids}  # one slot each
    for run_id in run_ids:
        seen = report(rt, run_id)
        others = [f"marker-{r}" for r in ["learn", *run_ids] if r != run_id]
        listed = [
            *seen["home_files"],
            *seen["workspace_files"],
            *seen["workspace_root"],
        ]
        # Unconfined, the stand-in may list the workspace root (other runs' workspaces are
        # there), but its own HOME and workspace hold nothing of another run.
        assert not set(others) & set(seen["home_files"])
        assert not set(others) & set(seen["workspace_files"])
        assert f"marker-{run_id}" not in listed  # written after the look
        env = seen["env"]
        assert isinstance(env, dict)
        assert env["NEXUS_RUN_ID"] == run_id
        assert not any(f"pw-{r}" in env.values() for r in run_ids if r != run_id)


async def test_an_idle_runner_killed_is_replaced_and_no_run_is_touched(tmp_path: Path) -> None:
    rt = runtime(tmp_path, "sleep")
    await rt.start()
    try:
        await rt.start_run(config("busy"))
        await wait_idle(rt, 1)
        [victim] = idle(rt)
        os.killpg(victim.proc.pid, signal.SIGKILL)
        await eventually(
            lambda: [r for r in idle(rt) if r is not victim], within=30, what="a replacement"
        )
        assert not victim.slot.exists()  # its slot removed with it
        assert (await rt.status("busy")).state is RuntimeState.RUNNING
        assert not any((p / TAKEN_FILE).exists() for p in (tmp_path / "runs").iterdir())
    finally:
        await rt.cancel_run("busy")
        await rt.close()


async def test_a_busy_warm_runner_killed_resumes_cold_as_attempt_2(tmp_path: Path) -> None:
    rt = runtime(tmp_path, "sleep")
    await rt.start()
    two = config("r", max_attempts=2)
    try:
        await rt.start_run(config("learn"))
        await wait_idle(rt, 1)
        pid = int((await rt.start_run(two)).handle)
        slot = rt.run_dir("r").resolve()
        os.killpg(pid, signal.SIGKILL)
        status = await eventually(lambda: rt.status("r"), lambda s: not s.live, what="exit")
        assert status.reason == "SIGKILL"
        again = await rt.start_run(two.model_copy(update={"attempt": 2}))
        assert int(again.handle) != pid
        assert not again.warm
        assert (slot / "runner-a2.pid").exists()  # in the run's dir: the slot
        assert json.loads((slot / "config.json").read_text())["attempt"] == 2
        await eventually(
            lambda: "run r agent" in (slot / "runner.log").read_text().split("warm")[-1]
        )
        assert (await rt.status("r", attempt=2)).state is RuntimeState.RUNNING
    finally:
        await rt.cancel_run("r", attempt=2)
        await rt.cancel_run("learn")
        await rt.close()


async def test_a_new_runtime_adopts_busy_warm_runners_and_discards_idle_ones(
    tmp_path: Path,
) -> None:
    old = runtime(tmp_path, "sleep")
    await old.start()
    await old.start_run(config("learn"))
    await wait_idle(old, 1)
    busy_pid = int((await old.start_run(config("busy"))).handle)
    await wait_idle(old, 1)
    [spare] = idle(old)
    # The old scheduler is gone without closing (a crash): its processes live on.
    new = runtime(tmp_path, "sleep", {"default": 0})
    await new.start()
    try:
        await eventually(lambda: not alive(spare.proc.pid), what="the idle runner killed")
        assert not spare.slot.exists()
        workspaces = tmp_path / "workspaces"
        assert not (workspaces / spare.slot.name).exists()
        assert alive(busy_pid)
        assert (await new.status("busy")).state is RuntimeState.RUNNING  # adopted
        await new.cancel_run("busy")
        await eventually(lambda: not alive(busy_pid), what="the adopted runner stopped")
        assert (await new.status("busy")).state is not RuntimeState.RUNNING
    finally:
        await new.cancel_run("learn")
        await new.close()
        await old.close()


async def test_the_pool_is_refilled_after_a_burst(tmp_path: Path) -> None:
    rt = runtime(tmp_path, "exit0", {"default": 2})
    await rt.start()
    try:
        await rt.start_run(config("learn"))
        await wait_idle(rt, 2)
        for i in range(4):
            await rt.start_run(config(f"burst-{i}"))
        served = [served_warm(rt, f"burst-{i}") for i in range(4)]
        assert served == [True, True, False, False]
        await wait_idle(rt, 2)
        assert len(idle(rt)) == 2
        for run_id in ["learn", *(f"burst-{i}" for i in range(4))]:
            assert await ended(rt, run_id) == 0
    finally:
        await rt.close()
    # Closed: the idle runners discarded, their slots gone; the two taken slots stay.
    left = {p.resolve() for p in (tmp_path / "runs").glob("warm-*")}
    assert left == {rt.run_dir("burst-0").resolve(), rt.run_dir("burst-1").resolve()}


async def test_the_idle_cap_and_per_agent_sizes_hold(tmp_path: Path) -> None:
    rt = runtime(tmp_path, "exit0", {"default": 2, "reviewer": 0}, max_idle=3)
    await rt.start()
    try:
        await rt.start_run(config("a1", agent_id="planner"))
        await rt.start_run(config("b1", agent_id="implementer"))
        await rt.start_run(config("c1", agent_id="reviewer"))
        assert rt.warm is not None
        await eventually(lambda: rt.warm.pool.idle_count >= 3, within=30, what="3 idle")  # type: ignore[union-attr]
        assert rt.warm.pool.idle_count == 3
        assert idle(rt, "reviewer") == []
        for run_id in ("a1", "b1", "c1"):
            assert await ended(rt, run_id) == 0
    finally:
        await rt.close()
    assert list((tmp_path / "runs").glob("warm-*")) == []  # closed: idle ones discarded


def confined_config(run_id: str, base_url: str) -> RunConfig:
    body = config(run_id).model_dump(mode="json")
    body["model"]["base_url"] = base_url
    return RunConfig.model_validate(body)


async def test_a_run_of_another_shape_starts_cold(tmp_path: Path) -> None:
    rt = runtime(tmp_path, "exit0", confined=True)
    await rt.start()
    try:
        await rt.start_run(confined_config("a", "http://model-a.invalid/v1"))
        await wait_idle(rt, 1)
        [warm_a] = idle(rt)
        # Another model endpoint: another sandbox, so never this runner.
        await rt.start_run(confined_config("b", "http://model-b.invalid/v1"))
        assert not served_warm(rt, "b")
        assert await ended(rt, "b") == 0
        # The pool now follows b's shape: a's runner is discarded, one of b's shape comes.
        await eventually(lambda: not warm_a.slot.exists(), what="the stale runner discarded")
        await wait_idle(rt, 1)
        await rt.start_run(confined_config("c", "http://model-b.invalid/v1"))
        assert served_warm(rt, "c")
        assert await ended(rt, "c") == 0, (rt.run_dir("c") / "runner.log").read_text()
        assert await ended(rt, "a") == 0
    finally:
        await rt.close()


async def test_without_run_credentials_the_configured_one_comes_with_the_run(
    tmp_path: Path,
) -> None:
    """No auth callout: runners connect with the scheduler's configured NATS credential, which
    a warm runner still does not hold before its run (the hand-off brings it)."""
    rt = LocalProcessRuntime(
        tmp_path / "runs",
        command=(sys.executable, str(FAKE_RUNNER)),
        env={
            "FAKE_RUNNER_MODE": "isolation",
            "NEXUS_WORKSPACE_ROOT": str(tmp_path / "workspaces"),
            "NEXUS_NATS_TOKEN": "the-configured-token",
        },
        warm_pool={"default": 1},
    )
    await rt.start()
    try:
        await rt.start_run(config("first"))
        await wait_idle(rt, 1)
        [warm] = idle(rt)
        environ = (Path("/proc") / str(warm.proc.pid) / "environ").read_bytes()
        assert b"the-configured-token" not in environ
        await rt.start_run(config("second"))
        assert served_warm(rt, "second")
        assert await ended(rt, "second") == 0
        assert report(rt, "second")["env"]["NEXUS_NATS_TOKEN"] == "the-configured-token"
        assert await ended(rt, "first") == 0
    finally:
        await rt.close()
