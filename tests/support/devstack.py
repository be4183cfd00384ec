"""A real dev stack (`nexus dev up` as processes) for tests: the part the suites share.

`Stack` runs the CLI against one stack home; `running` starts the stack, yields it and at
teardown runs `nexus dev down` and fails if any process the stack started (every one
`Stack.remember_processes` noted) is still alive. A suite's conftest subclasses `Stack` for
what differs (how `nexus` runs, which further processes to track) and passes its own
environment through `stack_env`.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil


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
    # How long teardown lets processes finish exiting after `dev down` returned.
    settle: float = 0.0

    def process(self, *args: str, timeout: float = 60) -> Result:
        """`nexus ARGS...` as a real process, as a user would run it."""
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

    def nexus(self, *args: str, timeout: float = 60) -> Result:
        """`nexus ARGS...`: a real process unless a suite runs it otherwise."""
        return self.process(*args, timeout=timeout)

    def state(self) -> dict[str, Any]:
        return json.loads((self.home / "state.json").read_text())

    def status(self, run_id: str) -> str:
        result = self.nexus("attach", run_id, "-o", "json")
        return result.json()["run"]["status"] if result.code == 0 else f"exit {result.code}"

    def events(self, run_id: str) -> list[dict[str, Any]]:
        """The run's events so far (none while the run is not known yet)."""
        result = self.nexus("events", run_id, "-o", "json")
        events: list[dict[str, Any]] = result.json()["events"] if result.code == 0 else []
        return events

    def stack_pids(self) -> dict[str, int]:
        """The processes to check at teardown, by label: the supervisor and every service."""
        state = self.state()
        pids = {f"supervisor:{state['supervisor']['pid']}": state["supervisor"]["pid"]}
        for name, s in state["services"].items():
            if s.get("pid"):
                pids[f"{name}:{s['pid']}"] = s["pid"]
        return pids

    def remember_processes(self) -> None:
        """Note every process of the stack now alive (`stack_pids`), for teardown."""
        for label, pid in self.stack_pids().items():
            with contextlib.suppress(psutil.Error):
                self.seen.setdefault(label, psutil.Process(pid))

    def leaked(self) -> list[str]:
        return [label for label, proc in self.seen.items() if _alive(proc)]


def _alive(proc: psutil.Process) -> bool:
    """Whether `proc` (the very process noted, not a reuse of its pid) still runs."""
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def running(
    stack: Stack, *up_args: str, check_up: Callable[[Result], None] | None = None
) -> Iterator[Stack]:
    """`nexus dev up UP_ARGS...`, yield the stack; then `dev down` and the leak check.

    For a fixture: ``yield from running(stack, ...)``.
    """
    up = stack.process("dev", "up", *up_args, "-o", "json", timeout=150)
    try:
        assert up.code == 0, up.stderr + up.stdout
        if check_up is not None:
            check_up(up)
        stack.remember_processes()
        yield stack
    finally:
        if (stack.home / "state.json").exists():
            stack.remember_processes()
            down = stack.process("dev", "down", timeout=150)
            time.sleep(stack.settle)
            leaked = stack.leaked()
            for label in leaked:  # never leave them behind, even when failing
                with contextlib.suppress(psutil.Error):
                    stack.seen[label].kill()
            assert down.code == 0, down.stderr
            assert not leaked, f"processes left running after dev down: {leaked}"


def stack_env(
    tmp: Path, extra: Mapping[str, str] | None = None, drop: tuple[str, ...] = ("NEXUS_",)
) -> dict[str, str]:
    """This environment without `drop`'s prefixes, a stack home under `tmp`, quick timings."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(drop)}
    env.update(
        {
            "NEXUS_DEV_HOME": str(tmp / ".nexus"),
            "NEXUS_CONTEXT_FILE": str(tmp / "contexts.yaml"),
            "NEXUS_CANCEL_GRACE_SECONDS": "2",
            "NEXUS_EXIT_GRACE_SECONDS": "1",
            "NEXUS_TICK_SECONDS": "0.2",
            "OTEL_SDK_DISABLED": "true",
            "COLUMNS": "200",
        }
    )
    env.update(extra or {})
    return env
