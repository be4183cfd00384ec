"""`python -m nexus_core` as a real process: ready on /readyz, drains and exits 0 on SIGTERM."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import sys

from nexus_events import subjects
from nexus_events.bus import Bus

from .support import eventually, query


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


async def _http_status(port: int, path: str) -> int:
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


async def test_serves_and_drains_on_sigterm(bus: Bus, nats_url: str, pg_dsn: str):
    port = _free_port()
    env = {
        **os.environ,
        "NEXUS_NATS_URL": nats_url,
        "NEXUS_DATABASE_URL": pg_dsn,
        "NEXUS_HEALTH_PORT": str(port),
        "NEXUS_FETCH_TIMEOUT": "0.2",
        "OTEL_SDK_DISABLED": "true",
    }
    proc = await asyncio.create_subprocess_exec(sys.executable, "-m", "nexus_core", env=env)
    try:
        await eventually(lambda: _http_status(port, "/readyz"), lambda s: s == 200, limit=30)
        assert await _http_status(port, "/healthz") == 200
        error, body = await query(bus, subjects.CORE_CATALOG_AGENTS_LIST)
        assert (error, body) == (None, {"agents": []})
        proc.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(proc.wait(), 30) == 0
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
