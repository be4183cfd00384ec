"""A real dev stack (`nexus dev up` as processes) for tests: the part the suites share.

`Stack` runs the CLI against one stack home; `running` starts the stack, yields it and at
teardown runs `nexus dev down` and fails if any process the stack started (every one
`Stack.remember_processes` noted) is still alive. A suite's conftest subclasses `Stack` for
what differs (how `nexus` runs, which further processes to track) and passes its own
environment through `stack_env`. `start_replica` runs one more replica of a supervised
service (a second core) beside the stack, with that service's very environment.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import nats.errors
import psutil
from nexus_cli.client import Session
from nexus_cli.commands.run_events import event_dict
from nexus_cli.devstack.nats_auth import without_credentials
from nexus_cli.errors import CliError, ExitCode
from nexus_cli.options import DEFAULT_TIMEOUT
from nexus_cli.target import Target
from nexus_events.contract.streams import RUNS
from nexus_events.errors import BusError

T = TypeVar("T")


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
        """The run's status as core projects it (`nexus attach`'s), or "exit N" with the exit
        code `nexus attach` would have had (3: no such run, 4: NATS or core unreachable)."""

        async def ask(s: Session) -> str:
            return str((await s.get_run(run_id))["status"])

        return self._read(ask, lambda code: f"exit {code}")

    def events(self, run_id: str) -> list[dict[str, Any]]:
        """The run's events so far, as `nexus events -o json` lists them (none while the run
        is not known yet, or while NATS cannot be read)."""

        async def read(s: Session) -> list[dict[str, Any]]:
            return [event_dict(d) async for d in s.bus.replay(RUNS, run_id=run_id)]

        return self._read(read, lambda _: [])

    def _read(self, query: Callable[[Session], Awaitable[T]], failed: Callable[[int], T]) -> T:
        """`query` through the CLI's own client, in this process: the tests poll runs often,
        and a CLI process costs about a second of CPU that the stack under test needs (a
        test that checks the CLI itself runs `nexus`)."""
        url, user, password = without_credentials(self.state()["nats_url"])
        target = Target("test", url, None, self.home, user, password)

        async def session() -> T:
            async with Session(target, DEFAULT_TIMEOUT) as s:
                return await query(s)

        try:
            return asyncio.run(session())
        except CliError as exc:
            return failed(int(exc.code))
        except (BusError, nats.errors.Error):  # as the CLI: a bus failure leaves as exit 4
            return failed(int(ExitCode.UNAVAILABLE))

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


@dataclass
class Replica:
    """One more process of a supervised service, started beside the stack (not supervised:
    nothing restarts it, `dev down` does not stop it; `stop` or the teardown's leak check)."""

    name: str
    proc: subprocess.Popen[bytes]
    health_url: str
    log: Path

    def ready(self) -> bool:
        """Whether its /readyz answers 200."""
        try:
            with urllib.request.urlopen(self.health_url + "/readyz", timeout=2) as resp:
                return bool(resp.status == 200)
        except (OSError, urllib.error.URLError):
            return False

    def stop(self, timeout: float = 40.0) -> int:
        """SIGTERM (it drains), SIGKILL after `timeout`; its exit code."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                return self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        return self.proc.wait()


def service_env(stack: Stack, name: str) -> dict[str, str]:
    """The environment the supervisor started service `name` with, read from its process."""
    pid = stack.state()["services"][name]["pid"]
    env: dict[str, str] = psutil.Process(pid).environ()
    return env


def start_replica(stack: Stack, name: str = "core", module: str = "nexus_core") -> Replica:
    """``python -m <module>`` with the environment of the supervised `name` but its own health
    port (and no Prometheus port, which only one process can bind): a second replica on the
    same NATS and database. Noted in `stack.seen`, so teardown fails if it is left running."""
    env = service_env(stack, name)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env["NEXUS_HEALTH_PORT"] = str(port)
    env.pop("NEXUS_METRICS_PROMETHEUS_PORT", None)
    log = stack.home / "logs" / f"{name}-replica-{port}.log"
    with log.open("ab") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", module],
            env=env,
            cwd=stack.home,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    stack.seen[f"{name}-replica:{proc.pid}"] = psutil.Process(proc.pid)
    return Replica(name, proc, f"http://127.0.0.1:{port}", log)
