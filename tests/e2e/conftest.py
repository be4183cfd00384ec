"""The whole stack as a user runs it: `nexus dev up --offline-model` as real processes.

One stack serves the package (starting it is the slow part). Every command goes through the
CLI in a subprocess, as a person would type it; the runner is the real `nexus_runner`, the
model is the offline scripted server (`nexus_cli.devstack.offline_model`), whose script a run
selects with a keyword in its input (`[offline-model:slow]`, ...). Teardown runs
`nexus dev down` and fails if any process the stack started, runners included, is still alive.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
import pytest

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
# A run of the offline model takes a few seconds; a slow CI machine gets some slack.
RUN_WAIT = 90.0


@dataclass
class Result:
    code: int
    stdout: str
    stderr: str

    def json(self) -> Any:
        return json.loads(self.stdout)


@dataclass
class Stack:
    home: Path
    cwd: Path
    env: dict[str, str]
    seen: dict[str, psutil.Process] = field(default_factory=dict)

    def nexus(self, *args: str, timeout: float = 60) -> Result:
        """`nexus ARGS...` as a process, as a user would run it."""
        proc = subprocess.run(
            [sys.executable, "-m", "nexus_cli", *args],
            env=self.env,
            cwd=self.cwd,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        return Result(proc.returncode, proc.stdout, proc.stderr)

    def state(self) -> dict[str, Any]:
        return json.loads((self.home / "state.json").read_text())

    def remember_processes(self) -> None:
        """Note the supervisor, every service and every runner now alive (for teardown)."""
        state = self.state()
        pids = [state["supervisor"]["pid"]]
        pids += [s["pid"] for s in state["services"].values() if s.get("pid")]
        runs = str((self.home / "runs").resolve())
        for proc in psutil.process_iter(["cwd"]):
            cwd = proc.info.get("cwd") or ""
            if cwd.startswith(runs):
                pids.append(proc.pid)
        for pid in pids:
            with contextlib.suppress(psutil.Error):
                self.seen.setdefault(f"{pid}", psutil.Process(pid))

    def status(self, run_id: str) -> str:
        result = self.nexus("attach", run_id, "-o", "json")
        return result.json()["run"]["status"] if result.code == 0 else f"exit {result.code}"

    def events(self, run_id: str) -> list[dict[str, Any]]:
        """The run's events so far (none while the run is not known yet)."""
        result = self.nexus("events", run_id, "-o", "json")
        events: list[dict[str, Any]] = result.json()["events"] if result.code == 0 else []
        return events


def eventually(probe: Callable[[], Any], check: Callable[[Any], bool], limit: float = 30) -> Any:
    """Retry `probe` until `check(value)`; fail with the last value at the deadline."""
    deadline = time.monotonic() + limit
    while True:
        value = probe()
        if check(value):
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"condition not met within {limit}s; last value: {value!r}")
        time.sleep(0.25)


def stack_env(tmp: Path) -> dict[str, str]:
    drop = ("NEXUS_", "OPENAI_")
    env = {k: v for k, v in os.environ.items() if not k.startswith(drop)}
    # The runner runs the demo repo's tests with `python -m pytest`: this interpreter's.
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env.update(
        {
            "NEXUS_DEV_HOME": str(tmp / ".nexus"),
            "NEXUS_CONTEXT_FILE": str(tmp / "contexts.yaml"),
            "NEXUS_SCHEDULER_CANCEL_GRACE_SECONDS": "2",
            "NEXUS_SCHEDULER_EXIT_GRACE_SECONDS": "1",
            "NEXUS_SCHEDULER_TICK_SECONDS": "0.2",
            "NEXUS_RUNNER_HEARTBEAT_INTERVAL": "2",
            "OTEL_SDK_DISABLED": "true",
            "COLUMNS": "200",
        }
    )
    return env


@pytest.fixture(scope="package")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    tmp = tmp_path_factory.mktemp("e2e")
    s = Stack(tmp / ".nexus", tmp, stack_env(tmp))
    up = s.nexus("dev", "up", "--offline-model", "-o", "json", timeout=150)
    try:
        assert up.code == 0, up.stderr + up.stdout
        assert up.json()["offline_model"] is True
        s.remember_processes()
        yield s
    finally:
        if (s.home / "state.json").exists():
            s.remember_processes()
            down = s.nexus("dev", "down", timeout=150)
            time.sleep(0.2)
            leaked = [f"{p.pid} {p.name()}" for p in s.seen.values() if _alive(p)]
            for proc in s.seen.values():  # never leave them behind, even when failing
                if _alive(proc):
                    proc.kill()
            assert down.code == 0, down.stderr
            assert not leaked, f"processes left running after dev down: {leaked}"


def _alive(proc: psutil.Process) -> bool:
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


@pytest.fixture
def demo_repo(tmp_path: Path) -> Path:
    """A fresh git repository with examples/demo-repo's content (its test fails)."""
    repo = tmp_path / "demo-repo"
    shutil.copytree(EXAMPLES / "demo-repo", repo)
    git = ["git", "-C", str(repo), "-c", "user.name=e2e", "-c", "user.email=e2e@nexus.local"]
    subprocess.run([*git, "init", "--quiet", "-b", "main"], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "--quiet", "-m", "calc"], check=True)
    return repo
