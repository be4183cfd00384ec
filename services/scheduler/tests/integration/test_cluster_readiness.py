"""The scheduler's readiness on a real three-node JetStream cluster: /readyz says 503 while
JetStream elects a meta leader (nothing could be dispatched or recorded) and 200 again after,
with the same process."""

from __future__ import annotations

import uuid

import pytest
from nexus_events.transport.bus import Bus, BusSettings
from nexus_scheduler.app import SchedulerApp
from nexus_scheduler.config import SchedulerSettings
from nexus_testing import NatsCluster, eventually, http_status

from tests.support.noop_runtime import NoopRuntime

ELECTION = 15.0  # as the cluster tests of nexus_events


async def test_not_ready_while_jetstream_elects_a_leader_ready_after(
    nats_cluster: NatsCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NEXUS_STREAMS_REPLICAS", "3")  # the lease bucket outlives the kill
    bus = await Bus.connect(BusSettings(url=nats_cluster.urls, name="test"), source="test")
    try:
        await nats_cluster.ensure_streams(bus.nc.jetstream(timeout=5))
    finally:
        await bus.close()
    settings = SchedulerSettings(
        replica_id=f"replica-{uuid.uuid4().hex[:6]}",
        tick_seconds=3600,
        lease_ttl_seconds=10,
        health_port=0,
        jetstream_probe_seconds=0.05,
    )
    app = SchedulerApp(
        settings,
        bus_settings=BusSettings(url=nats_cluster.urls, name="scheduler-test"),
        runtime=NoopRuntime(),
    )
    await app.start()
    try:
        assert app.health is not None
        port = app.health.port

        async def readyz() -> int:
            return await http_status(port, "/readyz")

        await eventually(readyz, lambda s: s == 200, within=ELECTION, what="ready at start")
        meta = nats_cluster.meta_leader()
        assert meta is not None
        nats_cluster.kill(meta)
        assert app.jetstream is not None
        probe = app.jetstream

        async def readiness() -> tuple[int, str | None]:
            # The status and why, read together: the probe may recover (a new meta leader)
            # a moment after a 503, so the why is taken with the status, not after it.
            return await readyz(), probe.problem

        await eventually(
            readiness,
            lambda r: r[0] == 503 and r[1] is not None,  # not ready, and says why
            within=ELECTION,
            what="not ready, with the reason",
        )
        await eventually(readyz, lambda s: s == 200, within=ELECTION, what="ready again")
        assert await http_status(port, "/healthz") == 200  # alive throughout, not restarted
    finally:
        await app.stop()
