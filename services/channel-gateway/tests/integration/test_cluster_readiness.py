"""The gateway's readiness on a real three-node JetStream cluster: /readyz says 503 while
JetStream elects a meta leader (an inbound message could not be recorded) and 200 again
after, with the same process."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from nexus_events.transport.bus import Bus, BusSettings
from nexus_testing import NatsCluster
from nexus_testing.readiness import ready_again_after_an_election
from tests.fakes.slack_api import FakeSlack
from tests.fakes.telegram_api import FakeTelegram
from tests.support.gateway import gateway_settings

from nexus_channel_gateway.app import GatewayApp


@pytest.fixture
async def cluster_bus(nats_cluster: NatsCluster) -> AsyncIterator[Bus]:
    bus = await Bus.connect(BusSettings(url=nats_cluster.urls, name="gateway-test"), source="t")
    await nats_cluster.ensure_streams(bus.nc.jetstream(timeout=5))
    try:
        yield bus
    finally:
        await bus.close()


async def test_not_ready_while_jetstream_elects_a_leader_ready_after(
    nats_cluster: NatsCluster,
    cluster_bus: Bus,
    pg_dsn: str,
    slack: FakeSlack,
    telegram: FakeTelegram,
) -> None:
    settings = gateway_settings(
        pg_dsn, slack.api_url, telegram.base_url, health_port=0, jetstream_probe_seconds=0.05
    )
    app = GatewayApp(settings, bus=cluster_bus, sweep_interval=0.5)
    await app.start()
    try:
        await ready_again_after_an_election(app, nats_cluster)
    finally:
        await app.stop()
