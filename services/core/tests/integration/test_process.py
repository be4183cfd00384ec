"""`python -m nexus_core` as a real process: ready on /readyz, drains and exits 0 on SIGTERM."""

from __future__ import annotations

import asyncio
import os
import signal
import sys

from nexus_events.contract import subjects
from nexus_events.transport.bus import Bus
from nexus_testing import free_port, http_status

from .support import eventually, query


async def test_serves_and_drains_on_sigterm(bus: Bus, nats_url: str, pg_dsn: str):
    port = free_port()
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
        await eventually(lambda: http_status(port, "/readyz"), lambda s: s == 200, within=90)
        assert await http_status(port, "/healthz") == 200
        error, body = await query(bus, subjects.CORE_CATALOG_AGENTS_LIST)
        assert (error, body) == (None, {"agents": []})
        proc.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(proc.wait(), 30) == 0
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
