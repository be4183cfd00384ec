"""One real dev stack (`nexus dev up` as a process) shared by the CLI's integration tests.

The runner is the stand-in `fake_runner.py` (configured through the scheduler's own
NEXUS_SCHEDULER_LOCAL_COMMAND). Teardown runs `nexus dev down` and fails the run if any
process the stack started is still alive.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
import pytest
from typer.testing import CliRunner

from nexus_cli.devstack.state import ProcessRef
from nexus_cli.main import app

FAKE_RUNNER = Path(__file__).with_name("fake_runner.py")


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
    env: dict[str, str]

    def nexus(self, *args: str) -> Result:
        """Run the CLI in this process (typer's CliRunner) with the stack's environment."""
        result = CliRunner().invoke(app, list(args), env=self.env, catch_exceptions=False)
        return Result(result.exit_code, result.stdout, result.stderr)

    def process(self, *args: str, timeout: float = 60) -> Result:
        """Run the CLI as a real process, as a user would."""
        proc = subprocess.run(
            [sys.executable, "-m", "nexus_cli", *args],
            env=self.env,
            cwd=self.home.parent,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        return Result(proc.returncode, proc.stdout, proc.stderr)

    def state(self) -> dict[str, Any]:
        return json.loads((self.home / "state.json").read_text())

    def processes(self) -> dict[str, ProcessRef]:
        """The supervisor and every service process, with their start times."""
        state = self.state()
        refs = {"supervisor": ProcessRef.model_validate(state["supervisor"])}
        for name, s in state["services"].items():
            if s.get("pid"):
                refs[f"{name}:{s['pid']}"] = ProcessRef.model_validate(s)
        return refs


def eventually(probe: Callable[[], Any], check: Callable[[Any], bool], limit: float = 20) -> Any:
    """Retry `probe` until `check(value)`; fail with the last value at the deadline."""
    deadline = time.monotonic() + limit
    while True:
        value = probe()
        if check(value):
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"condition not met within {limit}s; last value: {value!r}")
        time.sleep(0.1)


def stack_env(tmp: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("NEXUS_")}
    env.update(
        {
            "NEXUS_DEV_HOME": str(tmp / ".nexus"),
            "NEXUS_CONTEXT_FILE": str(tmp / "contexts.yaml"),
            "NEXUS_SCHEDULER_LOCAL_COMMAND": json.dumps([sys.executable, str(FAKE_RUNNER)]),
            "NEXUS_SCHEDULER_CANCEL_GRACE_SECONDS": "2",
            "NEXUS_SCHEDULER_EXIT_GRACE_SECONDS": "1",
            "NEXUS_SCHEDULER_TICK_SECONDS": "0.2",
            "OTEL_SDK_DISABLED": "true",
            "COLUMNS": "200",
        }
    )
    return env


@pytest.fixture(scope="package")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    tmp = tmp_path_factory.mktemp("stack")
    s = Stack(tmp / ".nexus", stack_env(tmp))
    up = s.process("dev", "up", "-o", "json", timeout=150)
    refs: dict[str, ProcessRef] = {}
    try:
        assert up.code == 0, up.stderr + up.stdout
        refs = s.processes()
        yield s
    finally:
        if (s.home / "state.json").exists():
            refs = {**refs, **s.processes()}
            down = s.process("dev", "down", timeout=150)
            leaked = [name for name, r in refs.items() if r.alive()]
            for ref in refs.values():  # do not leave them behind even when the assertion fails
                if ref.alive() and ref.pid is not None:
                    psutil.Process(ref.pid).kill()
            assert down.code == 0, down.stderr
            assert not leaked, f"processes left running after dev down: {leaked}"
