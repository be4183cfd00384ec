from __future__ import annotations

import asyncio
import json
import os
import stat
import sys
import time
from pathlib import Path

import pytest
from nexus_scheduler.callout_jwt import Issuer
from nexus_scheduler.run_credentials import RunCredentialMinter, verify
from nexus_scheduler.runtime.base import RuntimeState
from nexus_scheduler.runtime.local import LocalProcessRuntime

from ..factories import config
from ..waiting import eventually

FAKE_RUNNER = Path(__file__).parent.parent / "fake_runner.py"


def runtime(tmp_path: Path, mode: str, kill_grace: float = 5.0) -> LocalProcessRuntime:
    return LocalProcessRuntime(
        tmp_path / "runs",
        command=(sys.executable, str(FAKE_RUNNER)),
        kill_grace=kill_grace,
        env={"FAKE_RUNNER_MODE": mode},
    )


async def log_has(rt: LocalProcessRuntime, run_id: str, text: str) -> bool:
    path = rt.run_dir(run_id) / "runner.log"
    return path.exists() and text in path.read_text()


async def test_start_writes_private_config_and_captures_logs(tmp_path: Path) -> None:
    rt = runtime(tmp_path, "exit0")
    await rt.start()
    cfg = config("run-1", agent_id="planner")
    handle = await rt.start_run(cfg)
    assert handle.runtime == "local"
    assert int(handle.handle) > 0
    # idempotent: a second start adopts the first process
    assert await rt.start_run(cfg) == handle
    lines = [line async for line in rt.stream_logs("run-1")]
    assert lines == ["run run-1 agent planner", "done"]
    status = await rt.status("run-1")
    assert status.state is RuntimeState.EXITED
    assert status.exit_code == 0
    cfg_file = rt.run_dir("run-1") / "config.json"
    assert json.loads(cfg_file.read_text())["run_id"] == "run-1"
    assert stat.S_IMODE(cfg_file.stat().st_mode) == 0o600


async def test_unknown_run_is_gone_and_cancel_is_noop(tmp_path: Path) -> None:
    rt = runtime(tmp_path, "sleep")
    await rt.start()
    assert (await rt.status("nope")).state is RuntimeState.GONE
    await rt.cancel_run("nope")


async def test_cancel_sends_sigterm_to_the_group(tmp_path: Path) -> None:
    rt = runtime(tmp_path, "spawn-child")
    await rt.start()
    await rt.start_run(config("run-2"))
    await eventually(lambda: log_has(rt, "run-2", "ready"))
    assert (await rt.status("run-2")).state is RuntimeState.RUNNING
    child_pid = int(
        next(
            line.split()[1]
            for line in (rt.run_dir("run-2") / "runner.log").read_text().splitlines()
            if line.startswith("child ")
        )
    )
    started = time.monotonic()
    await rt.cancel_run("run-2")
    assert time.monotonic() - started < 4  # SIGTERM sufficed, no kill grace spent
    status = await rt.status("run-2")
    assert status.state is RuntimeState.EXITED
    assert status.reason == "SIGTERM"

    async def child_gone() -> bool:
        try:
            os.kill(child_pid, 0)
        except ProcessLookupError:
            return True
        # a zombie reparented to init is gone for our purposes
        return _process_state(child_pid) == "Z"

    await eventually(child_gone)


async def test_cancel_escalates_to_sigkill_after_grace(tmp_path: Path) -> None:
    rt = runtime(tmp_path, "ignore-term", kill_grace=0.5)
    await rt.start()
    await rt.start_run(config("run-3"))
    await eventually(lambda: log_has(rt, "run-3", "ready"))
    await rt.cancel_run("run-3")
    status = await rt.status("run-3")
    assert status.state is RuntimeState.EXITED
    assert status.reason == "SIGKILL"
    assert await log_has(rt, "run-3", "ignoring SIGTERM")


async def test_stream_logs_follows_a_live_process(tmp_path: Path) -> None:
    rt = runtime(tmp_path, "sleep")
    await rt.start()
    await rt.start_run(config("run-4"))
    seen: list[str] = []

    async def follow() -> None:
        async for line in rt.stream_logs("run-4"):
            seen.append(line)

    await eventually(lambda: log_has(rt, "run-4", "ready"))
    task = asyncio.create_task(follow())
    await eventually(lambda: _true(seen == ["run run-4 agent implementer", "ready"]))
    assert not task.done()  # still following
    await rt.cancel_run("run-4")
    await asyncio.wait_for(task, timeout=5)


async def _true(value: bool) -> bool:
    return value


@pytest.mark.parametrize("mode", ["sleep"])
async def test_killed_process_reports_exited(tmp_path: Path, mode: str) -> None:
    rt = runtime(tmp_path, mode)
    await rt.start()
    handle = await rt.start_run(config("run-5"))
    os.kill(int(handle.handle), 9)

    async def exited() -> bool:
        return (await rt.status("run-5")).state is RuntimeState.EXITED

    await eventually(exited)
    assert (await rt.status("run-5")).reason == "SIGKILL"


def _process_state(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_text().split()[2]


async def test_ended_processes_are_forgotten_past_a_count_and_an_age(tmp_path: Path) -> None:
    """Before: every process ever started stayed in the table for the scheduler's life."""
    now = [1000.0]
    rt = LocalProcessRuntime(
        tmp_path / "runs",
        command=(sys.executable, str(FAKE_RUNNER)),
        env={"FAKE_RUNNER_MODE": "exit0"},
        finished_kept=2,
        finished_ttl=60,
        monotonic=lambda: now[0],
    )
    await rt.start()
    ids = [f"short-{i}" for i in range(5)]
    for i, run_id in enumerate(ids):
        await rt.start_run(config(run_id))

        async def ended(run_id: str = run_id, kept: int = min(i + 1, 2)) -> bool:
            status = await rt.status(run_id)
            return status.state is RuntimeState.EXITED and rt.tracked == kept

        await eventually(ended, what=f"{run_id} ended and the table holds the last two")
        now[0] += 1
    for run_id in ids[:3]:  # forgotten: answered from the pid file
        status = await rt.status(run_id)
        assert status.state is RuntimeState.GONE
        assert "is not running" in status.message
    for run_id in ids[3:]:  # remembered, with their exit code
        status = await rt.status(run_id)
        assert (status.state, status.exit_code) == (RuntimeState.EXITED, 0)

    # A live runner is never forgotten; ended ones go once they are older than the TTL.
    rt.env["FAKE_RUNNER_MODE"] = "sleep"
    await rt.start_run(config("long"))
    assert rt.tracked == 3
    now[0] += 61
    assert (await rt.status("long")).state is RuntimeState.RUNNING
    assert rt.tracked == 1
    assert (await rt.status(ids[4])).state is RuntimeState.GONE
    await rt.cancel_run("long")
    await eventually(lambda: _true(rt.tracked == 1), what="the cancelled runner is remembered")
    assert (await rt.status("long")).state is RuntimeState.EXITED
    await rt.close()


async def _true(value: bool) -> bool:
    return value


async def test_the_runner_gets_only_the_environment_it_needs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Whatever started the scheduler (a shell with cloud keys, other services' tokens) is
    not inherited: the runner's /proc/self/environ holds what it reads and a HOME of its own."""
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "honey-aws-secret-0001")
    monkeypatch.setenv("NEXUS_PLANE_API_TOKEN", "honey-plane-token-0002")
    monkeypatch.setenv("SSH_AUTH_SOCK", "/tmp/honey-agent.sock")
    monkeypatch.setenv("OPERATOR_EXTRA", "passed-on-request")
    monkeypatch.setenv("NEXUS_NATS_URL", "nats://127.0.0.1:4999")
    monkeypatch.setenv("NEXUS_LLM_API_KEY", "the-runner-needs-this")
    monkeypatch.setenv("OTEL_SERVICE_NAME", "nexus-runner-test")
    monkeypatch.setenv("HOME", str(tmp_path / "operator-home"))
    # The scheduler's own NATS identity must not reach the runner: the run's replaces it.
    monkeypatch.setenv("NEXUS_NATS_USER", "scheduler")
    monkeypatch.setenv("NEXUS_NATS_PASSWORD", "honey-scheduler-password-0003")
    minter = RunCredentialMinter(Issuer.generate().encode(), min_ttl=600)
    rt = LocalProcessRuntime(
        tmp_path / "runs",
        command=(sys.executable, str(FAKE_RUNNER)),
        env={"FAKE_RUNNER_MODE": "environ"},
        pass_env=["OPERATOR_EXTRA"],
        credentials=lambda c: minter.runner_nats_env(c, time.time()),
    )
    await rt.start()
    await rt.start_run(config("run-env"))
    status = await eventually(
        lambda: rt.status("run-env"), lambda s: not s.live, what="the runner to exit"
    )
    assert status.exit_code == 0, (rt.run_dir("run-env") / "runner.log").read_text()
    env = json.loads((rt.run_dir("run-env") / "environ.json").read_text())
    assert "honey" not in json.dumps(env)
    assert env["NEXUS_NATS_URL"] == "nats://127.0.0.1:4999"
    assert env["NEXUS_LLM_API_KEY"] == "the-runner-needs-this"
    assert env["OTEL_SERVICE_NAME"] == "nexus-runner-test"
    assert env["OPERATOR_EXTRA"] == "passed-on-request"
    assert env["NEXUS_RUN_ID"] == "run-env"
    assert env["NEXUS_NATS_USER"] == "run:run-env"
    assert env["NEXUS_NATS_INBOX_PREFIX"] == "_INBOX_run-env"
    verify(minter.key, "run:run-env", env["NEXUS_NATS_PASSWORD"], now=time.time())
    home = Path(env["HOME"])
    assert home == rt.run_dir("run-env") / "home"
    assert stat.S_IMODE(os.stat(home).st_mode) == 0o700
    allowed = {"PATH", "HOME", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "FAKE_RUNNER_MODE"}
    unexpected = {
        k for k in env if k not in allowed and not k.startswith(("NEXUS_", "OTEL_", "TRACE"))
    }
    assert unexpected <= {"OPERATOR_EXTRA"}


async def test_a_later_attempt_replaces_the_run_s_process(tmp_path: Path) -> None:
    rt = runtime(tmp_path, "sleep")
    await rt.start()
    cfg = config("run-a")
    first = await rt.start_run(cfg)
    await eventually(lambda: log_has(rt, "run-a", "ready"))
    # attempt 1 still runs (the scheduler did not stop it): the runtime stops it itself
    second = await rt.start_run(cfg.model_copy(update={"attempt": 2}))
    assert second.handle != first.handle
    assert not _alive(int(first.handle))
    assert (await rt.status("run-a", attempt=2)).state is RuntimeState.RUNNING
    assert (await rt.status("run-a", attempt=1)).state is RuntimeState.GONE
    assert await rt.start_run(cfg.model_copy(update={"attempt": 2})) == second  # adopted
    await rt.cancel_run("run-a", attempt=1)  # a late stop of the old attempt
    assert (await rt.status("run-a", attempt=2)).state is RuntimeState.RUNNING
    assert json.loads((rt.run_dir("run-a") / "config.json").read_text())["attempt"] == 2
    # a new scheduler finds attempt 2 by its own pid file
    again = runtime(tmp_path, "sleep")
    assert (await again.status("run-a", attempt=2)).state is RuntimeState.RUNNING
    await again.cancel_run("run-a", attempt=2)
    assert not _alive(int(second.handle))


def _alive(pid: int) -> bool:
    from nexus_scheduler.runtime.sessions import proc_stat

    st = proc_stat(pid)
    return st is not None and st.state not in ("Z", "X")
