"""`nexus plane status|resync` against a running plane-sync (typer's CliRunner, real NATS)."""

from __future__ import annotations

import json

from nexus_events.transport.bus import Bus
from nexus_testing import eventually
from tests.fakes.plane import FakePlane
from tests.support.plane_sync import create_task
from tests.support.plane_sync import nexus_cli as _nexus

from nexus_plane_sync.app import PlaneSyncApp


async def test_status_and_resync_from_the_cli(
    bus: Bus, nats_url: str, plane: FakePlane, sync: PlaneSyncApp
) -> None:
    await create_task(bus, "t-cli", "From the CLI")
    await eventually(lambda: plane.by_external_id("t-cli"), what="the work item")
    status = await _nexus(nats_url, "plane", "status", "-o", "json")
    assert status.exit_code == 0, status.output
    data = json.loads(status.stdout)
    assert (data["mode"], data["tasks"], data["plane_reachable"]) == ("comments", 1, True)
    table = await _nexus(nats_url, "plane", "status")
    assert "runs shown as" in table.stdout
    resync = await _nexus(nats_url, "plane", "resync", "--task", "t-cli")
    assert resync.exit_code == 0, resync.output
    assert "1 work item write(s) queued" in resync.stdout
    bad = await _nexus(nats_url, "plane", "resync", "--task", "no.dots")
    assert bad.exit_code == 2
    await sync.stop()
    away = await _nexus(nats_url, "--timeout", "2", "plane", "status")
    assert away.exit_code == 4  # docs/cli.md: unavailable (a service is not answering)
    assert "plane-sync is not running" in away.output
