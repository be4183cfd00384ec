"""A gateway whose start fails part-way (its webhook port is taken) closes what it had
started, in reverse order: the FastStream handlers' connection, the pool it opened, the
health endpoint; the bus it was handed stays open, and it starts again once the port is free."""

from __future__ import annotations

import socket

import pytest
from nexus_events.transport.bus import Bus
from nexus_testing import http_status
from tests.fakes.slack_api import FakeSlack
from tests.fakes.telegram_api import FakeTelegram
from tests.support.gateway import gateway_settings

from nexus_channel_gateway.app import GatewayApp


async def test_a_failed_start_closes_what_had_started(
    bus: Bus, pg_dsn: str, slack: FakeSlack, telegram: FakeTelegram
) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        settings = gateway_settings(
            pg_dsn, slack.api_url, telegram.base_url,
            gateway_host="127.0.0.1", gateway_port=port, health_port=0,
        )  # fmt: skip
        app = GatewayApp(settings, bus=bus, sweep_interval=0.5)
        with pytest.raises(OSError, match="address already in use"):
            await app.start()
        # Everything before the ingress had started, and is closed again.
        assert app.handlers is not None
        assert app.handlers.durables  # the four durables were declared and the broker ran
        assert not app.handlers.connected
        assert app.store is not None
        assert app.store.pool.is_closing()
        assert app.health is not None
        assert await http_status(app.health.port, "/healthz") == 0
        assert not app.ready()
        assert bus.nc.is_connected  # handed in: not the app's to close
    try:
        await app.start()  # the port is free now
        assert app.ready()
        assert app.handlers.connected
    finally:
        await app.stop()
