"""`python -m nexus_flows` as a real process: ready on /readyz, answers queries, drains and
exits 0 on SIGTERM; invalid settings end it with one line and status 2."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys

from nexus_events.contract import subjects
from nexus_events.transport.bus import Bus
from nexus_testing import eventually, free_port, http_status


async def test_serves_and_drains_on_sigterm(bus: Bus, nats_url: str, pg_dsn: str) -> None:
    port = free_port()
    env = {
        **os.environ,
        "NEXUS_NATS_URL": nats_url,
        "NEXUS_DATABASE_URL": pg_dsn,
        "NEXUS_HEALTH_PORT": str(port),
        "NEXUS_FETCH_TIMEOUT": "0.2",
        "OTEL_SDK_DISABLED": "true",
    }
    proc = await asyncio.create_subprocess_exec(sys.executable, "-m", "nexus_flows", env=env)
    try:
        await eventually(lambda: http_status(port, "/readyz"), lambda s: s == 200, within=30)
        assert await http_status(port, "/healthz") == 200
        reply = await bus.nc.request(subjects.FLOWS_LIST, b"{}", timeout=5)
        assert json.loads(reply.data) == {"flows": [], "next_cursor": None}
        proc.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(proc.wait(), 30) == 0
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


async def test_invalid_settings_exit_2_naming_the_variable() -> None:
    env = {**os.environ, "NEXUS_TIMER_INTERVAL": "-1"}
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "nexus_flows", env=env, stderr=asyncio.subprocess.PIPE
    )
    _, err = await asyncio.wait_for(proc.communicate(), 30)
    assert proc.returncode == 2
    assert "NEXUS_TIMER_INTERVAL" in err.decode()
    assert len(err.decode().strip().splitlines()) == 1
