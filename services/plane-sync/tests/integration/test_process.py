"""`python -m nexus_plane_sync` as a process: healthy, ready, and a clean drain on SIGTERM;
a bare `nats pub` of a malformed webhook event is dead-lettered, not dropped."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys

from nexus_events.contract import subjects
from nexus_events.transport.bus import Bus
from nexus_testing import dead_letters, eventually, free_port, http_status
from tests.fakes.plane import FakePlane

from nexus_plane_sync.app import PlaneSyncApp


async def test_the_process_is_ready_and_drains_on_sigterm(
    nats_url: str, pg_dsn: str, plane: FakePlane
) -> None:
    health = free_port()
    env = {
        **os.environ,
        "NEXUS_NATS_URL": nats_url,
        "NEXUS_DATABASE_URL": pg_dsn,
        "NEXUS_PLANE_URL": plane.url,
        "NEXUS_PLANE_API_KEY": plane.api_key,
        "NEXUS_PLANE_WORKSPACE": plane.workspace,
        "NEXUS_PLANE_PROJECT_ID": plane.project_id,
        "NEXUS_PLANE_WEBHOOK_SECRET": "s",
        "NEXUS_WEBHOOK_HOST": "127.0.0.1",
        "NEXUS_WEBHOOK_PORT": str(free_port()),
        "NEXUS_HEALTH_PORT": str(health),
        "OTEL_SDK_DISABLED": "true",
    }
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "nexus_plane_sync", env=env,
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        await eventually(lambda: _ready(health), within=60, what="plane-sync ready (/readyz 200)")
        assert await http_status(health, "/healthz") == 200
        proc.send_signal(signal.SIGTERM)
        code = await asyncio.wait_for(proc.wait(), timeout=60)
        assert proc.stderr is not None
        log = (await proc.stderr.read()).decode()
        assert code == 0, log[-2000:]
        assert "plane-sync stopped" in log
        # Its probe for native agent runs reached the fake (the open-source edition: 404).
        assert any(path.endswith("/runs/") and status == 404 for _, path, status in plane.calls)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


async def _ready(port: int) -> bool:
    return await http_status(port, "/readyz") == 200


async def test_a_malformed_webhook_event_is_dead_lettered(bus: Bus, sync: PlaneSyncApp) -> None:
    await bus.js.publish(subjects.plane_event("x", "webhook_received"), b'{"event": "issue"}')
    letters = await eventually(lambda: dead_letters(bus), what="a dead letter")
    assert letters[0].reason == "invalid_event"
    assert letters[0].consumer == "plane_sync_webhooks"
    assert "delivery_id" in letters[0].error
