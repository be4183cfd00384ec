"""The scheduler's readiness on a real three-node JetStream cluster: /readyz says 503 while
JetStream elects a meta leader (nothing could be dispatched or recorded) and 200 again after,
with the same process."""

from __future__ import annotations

import uuid

import pytest
from nexus_events.transport.bus import Bus, BusSettings
from nexus_scheduler.app import SchedulerApp
from nexus_scheduler.config import SchedulerSettings
from nexus_testing import NatsCluster
from nexus_testing.readiness import ready_again_after_an_election

from tests.support.noop_runtime import NoopRuntime


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
        await ready_again_after_an_election(app, nats_cluster)
    finally:
        await app.stop()
