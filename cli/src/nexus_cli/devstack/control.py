"""Starting, waiting for and stopping the supervisor from the CLI side (`nexus dev ...`)."""

from __future__ import annotations

import contextlib
import fcntl
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from nexus_cli.devstack.postgres import stop_data_dir
from nexus_cli.devstack.state import StackState, pid_alive, read_state, terminate
from nexus_cli.errors import CliError, ExitCode

# How `spawn_supervisor` tells the supervisor to run a NATS cluster of N nodes.
CLUSTER_ENV = "NEXUS_DEV_CLUSTER"
# How often `up`/`down` look at the state file while waiting.
POLL = 0.1
SUPERVISOR_LOG = "supervisor.log"


@contextlib.contextmanager
def stack_lock(home: Path) -> Iterator[None]:
    """One `up`/`down` at a time per stack directory."""
    home.mkdir(parents=True, exist_ok=True)
    with (home / "dev.lock").open("w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def clean_stale(home: Path, state: StackState) -> list[str]:
    """Stop whatever a dead supervisor left behind; return what was stopped."""
    stopped = []
    for name, entry in state.services.items():
        if name != "postgres" and entry.alive():
            terminate(entry, timeout=10)
            stopped.append(name)
    if (home / "pg" / "postmaster.pid").exists():
        stop_data_dir(home / "pg")
        stopped.append("postgres")
    return stopped


def spawn_supervisor(home: Path, *, offline_model: bool = False, cluster: int = 1) -> int:
    """Start the supervisor in its own session; with `offline_model` it also starts the
    offline scripted model server and points the runners at it; `cluster`: NATS nodes."""
    (home / "logs").mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    if offline_model:
        env["NEXUS_DEV_OFFLINE_MODEL"] = "1"
    env.pop(CLUSTER_ENV, None)
    if cluster != 1:
        env[CLUSTER_ENV] = str(cluster)
    with (home / "logs" / SUPERVISOR_LOG).open("ab") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "nexus_cli.devstack.supervisor", str(home)],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            close_fds=True,
            env=env,
        )
    return proc.pid


def wait_ready(home: Path, pid: int, timeout: float) -> StackState:
    """Wait until the supervisor says ready; raise `CliError` if it fails or takes too long."""
    deadline = time.monotonic() + timeout
    log = home / "logs" / SUPERVISOR_LOG
    while True:
        state = read_state(home)
        if state is not None and state.supervisor.pid == pid:
            if state.status == "ready":
                return state
            if state.status == "failed":
                raise CliError(
                    f"the dev stack failed to start: {state.error}",
                    hint=f"see {log} and {home / 'logs'}/<service>.log",
                    code=ExitCode.UNAVAILABLE,
                )
        if not _pid_running(pid):
            raise CliError(
                "the dev stack supervisor exited while starting",
                hint=f"see {log}",
                code=ExitCode.UNAVAILABLE,
            )
        if time.monotonic() > deadline:
            raise CliError(
                f"the dev stack was not ready within {timeout:.0f}s",
                hint=f"it keeps trying in the background; see `nexus dev status` and {log}",
                code=ExitCode.TIMEOUT,
            )
        time.sleep(POLL)


def _pid_running(pid: int) -> bool:
    return pid_alive(pid, None)


def stop_stack(home: Path, state: StackState, timeout: float) -> bool:
    """SIGTERM the supervisor and wait for it to stop everything; then sweep leftovers."""
    ok = True
    if state.supervisor_alive():
        ok = terminate(state.supervisor, timeout=timeout)
    after = read_state(home) or state
    clean_stale(home, after)
    return ok
