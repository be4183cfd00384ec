"""The scheduler's probe endpoint: leader and standby are ready, a stopping one is not, and
`python -m nexus_scheduler` serves it as a real process that drains and exits 0 on SIGTERM."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import uuid
from pathlib import Path

from nexus_scheduler.app import SchedulerApp
from nexus_testing import free_port, http_status

from ..waiting import eventually
from .conftest import AppFactory


def _port(app: SchedulerApp) -> int:
    assert app.health is not None
    return app.health.port


async def test_leader_and_standby_are_ready_a_stopped_one_is_gone(make_app: AppFactory):
    leader = await make_app(health_port=0)
    standby = await make_app(health_port=0, wait_leading=False)
    assert leader.leading.is_set()
    assert not standby.leading.is_set()
    for app in (leader, standby):
        assert await http_status(_port(app), "/healthz") == 200
        assert await http_status(_port(app), "/readyz") == 200
        assert await http_status(_port(app), "/metrics") == 404
    port = _port(standby)
    await standby.stop()
    assert not standby.ready()
    assert await http_status(port, "/healthz") == 0  # closed: nothing answers


async def test_not_ready_once_stopping_while_still_alive(make_app: AppFactory):
    app = await make_app(health_port=0)
    port = _port(app)
    release = asyncio.Event()
    stop_entered = asyncio.Event()
    runtime_close = app.runtime.close

    async def slow_close() -> None:  # holds the drain open so the probes can be asked
        stop_entered.set()
        await release.wait()
        await runtime_close()

    app.runtime.close = slow_close  # type: ignore[method-assign]
    stopping = asyncio.create_task(app.stop())
    await asyncio.wait_for(stop_entered.wait(), 10)
    assert await http_status(port, "/readyz") == 503
    assert await http_status(port, "/healthz") == 200
    release.set()
    await stopping


async def test_process_serves_probes_and_drains_on_sigterm(nats_url: str, tmp_path: Path):
    port = free_port()
    env = {
        **os.environ,
        "NEXUS_NATS_URL": nats_url,
        "NEXUS_RUNTIME": "local",  # no run is requested: nothing is started
        "NEXUS_LOCAL_WORKDIR": str(tmp_path),
        "NEXUS_REPLICA_ID": f"proc-{uuid.uuid4().hex[:6]}",
        "NEXUS_HEALTH_PORT": str(port),
        "NEXUS_LEASE_TTL_SECONDS": "3",
        "OTEL_SDK_DISABLED": "true",
    }
    proc = await asyncio.create_subprocess_exec(sys.executable, "-m", "nexus_scheduler", env=env)
    try:

        async def ready() -> bool:
            return await http_status(port, "/readyz") == 200

        await eventually(ready, what="scheduler /readyz", within=30)
        assert await http_status(port, "/healthz") == 200
        proc.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(proc.wait(), 30) == 0
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
