"""The dev stack's state file (``.nexus/state.json``): who runs, on which pid and port.

Only the supervisor writes it (atomically: write a temp file, rename). Readers check every
pid against its recorded start time, so a stale file from a killed stack or a reused pid is
recognised as such rather than trusted.
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path
from typing import Literal

import psutil
from pydantic import BaseModel, ConfigDict, Field, ValidationError

STATE_FILE = "state.json"
# Start times differ by float rounding between psutil calls; this is the tolerance.
_CREATE_TIME_SLACK = 1.0

StackStatus = Literal["starting", "ready", "stopping", "stopped", "failed"]
ServiceState = Literal["starting", "running", "restarting", "stopped", "failed"]


class ProcessRef(BaseModel):
    model_config = ConfigDict(extra="ignore")

    pid: int | None = None
    create_time: float | None = Field(None, description="psutil start time of `pid`.")

    def alive(self) -> bool:
        return pid_alive(self.pid, self.create_time)


class ServiceEntry(ProcessRef):
    name: str
    state: ServiceState = "starting"
    restarts: int = 0
    last_exit_code: int | None = None
    started_at: float | None = None
    url: str | None = None
    log: str | None = None


class NatsNode(BaseModel):
    """One nats-server of a clustered dev stack (`nexus dev up --cluster N`): where it listens
    and keeps its store. Its process (pid, restarts) is the service entry of the same name."""

    model_config = ConfigDict(extra="ignore")

    name: str = Field(description="Server name, nats-1..N; also its service entry's name.")
    client_port: int
    cluster_port: int = Field(description="Where the other nodes route to it.")
    monitor_port: int = Field(description="HTTP monitoring: /healthz, /jsz.")
    store: str = Field(description="Its JetStream store directory.")

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.client_port}"

    @property
    def cluster_url(self) -> str:
        return f"nats://127.0.0.1:{self.cluster_port}"

    @property
    def monitor_url(self) -> str:
        return f"http://127.0.0.1:{self.monitor_port}"


class StackState(BaseModel):
    model_config = ConfigDict(extra="ignore")

    version: int = 1
    home: str
    status: StackStatus = "starting"
    error: str | None = None
    supervisor: ProcessRef = Field(default_factory=ProcessRef)
    nats_url: str | None = Field(
        None,
        description="Every NATS server URL, comma-joined, each with the operators' `admin`"
        " user and password (nats://admin:PASSWORD@127.0.0.1:PORT): what the CLI, scripts and"
        " the nats CLI connect with. The file is its owner's only (mode 0600).",
    )
    nats_monitor_url: str | None = None
    database_url: str | None = None
    core_health_url: str | None = None
    scheduler_health_url: str | None = None
    model_url: str | None = Field(None, description="The runners' model base URL, if known.")
    console_url: str | None = Field(None, description="Where the console's pages are.")
    console_token_file: str | None = Field(
        None, description="The file holding the stack's operate console token (mode 0600)."
    )
    services: dict[str, ServiceEntry] = Field(default_factory=dict)
    cluster_size: int = Field(1, description="NATS servers: 1, or a cluster of 3 or 5.")
    nats_nodes: list[NatsNode] = Field(
        default_factory=list, description="The cluster's nodes (none for a single server)."
    )

    def nats_services(self) -> list[str]:
        """The service entries of the stack's NATS servers: `nats`, or nats-1..N."""
        return [node.name for node in self.nats_nodes] or ["nats"]

    def supervisor_alive(self) -> bool:
        return self.supervisor.alive()


def state_path(home: Path) -> Path:
    return home / STATE_FILE


def read_state(home: Path) -> StackState | None:
    """The state file, or None if there is none (or it is unreadable: treated as stale)."""
    path = state_path(home)
    try:
        return StackState.model_validate_json(path.read_text())
    except (OSError, ValidationError):
        return None


def write_state(home: Path, state: StackState) -> None:
    path = state_path(home)
    tmp = path.with_suffix(f".tmp.{os.getpid()}")
    # Owner only: `nats_url` carries the operators' NATS password (devstack.nats_auth).
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(json.dumps(state.model_dump(mode="json"), indent=2))
    tmp.replace(path)


def process_ref(pid: int) -> ProcessRef:
    try:
        return ProcessRef(pid=pid, create_time=psutil.Process(pid).create_time())
    except psutil.Error:
        return ProcessRef(pid=pid)


def pid_alive(pid: int | None, create_time: float | None) -> bool:
    """Whether `pid` runs and is the same process (same start time) as recorded."""
    if pid is None:
        return False
    try:
        proc = psutil.Process(pid)
        if proc.status() == psutil.STATUS_ZOMBIE:
            return False
        started = proc.create_time()
    except psutil.Error:
        return False
    return create_time is None or abs(started - create_time) < _CREATE_TIME_SLACK


def terminate(ref: ProcessRef, *, timeout: float, kill_after: bool = True) -> bool:
    """SIGTERM `ref` (if it is still the recorded process) and wait; SIGKILL after `timeout`.

    Returns True if the process is gone afterwards.
    """
    if not ref.alive() or ref.pid is None:
        return True
    try:
        proc = psutil.Process(ref.pid)
        proc.terminate()
        proc.wait(timeout=timeout)
    except psutil.TimeoutExpired:
        if not kill_after:
            return False
        with contextlib.suppress(psutil.Error):
            proc.kill()
            proc.wait(timeout=5)
    except psutil.Error:
        return True
    return not ref.alive()
