"""Core's readiness after a NATS outage (issue 29, defect 1): it comes back by itself."""

from __future__ import annotations

import time

import pytest
from nexus_testing import NatsServer, eventually, http_status

from nexus_core.app import CoreApp


@pytest.mark.timeout(120)
async def test_ready_again_within_seconds_after_nats_returns_without_new_events(
    core: CoreApp, nats_server: NatsServer
) -> None:
    assert core.health is not None
    port = core.health.port
    await eventually(lambda: http_status(port, "/readyz"), lambda s: s == 200, what="ready")
    nats_server.stop()
    # Away long enough for every follower to count itself stuck (the state defect 1 never
    # left): nothing new is published, so only the outage can have put them there.
    await eventually(
        lambda: all(f.stuck for f in core.followers()), within=60, what="followers stuck"
    )
    assert await http_status(port, "/readyz") == 503
    nats_server.start()
    back = time.monotonic()
    await eventually(
        lambda: http_status(port, "/readyz"), lambda s: s == 200, within=10, what="ready again"
    )
    # Seconds, not minutes: the client reconnects every 0.5 s and a follower repositions
    # 0.5 s after a failure; the budget above leaves room for a loaded test machine.
    assert time.monotonic() - back < 10
    assert not any(f.stuck for f in core.followers())
