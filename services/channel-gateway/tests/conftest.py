"""Fixtures of the gateway tests: the fake Slack and Telegram APIs, and started gateways on
the test's real NATS and PostgreSQL (nexus_testing)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
from nexus_events.transport.bus import Bus
from tests.fakes.slack_api import FakeSlack
from tests.fakes.telegram_api import FakeTelegram
from tests.support.gateway import EchoRunner, gateway_settings

from nexus_channel_gateway.app import GatewayApp

MakeGateway = Callable[..., Awaitable[GatewayApp]]


@pytest.fixture
async def slack() -> AsyncIterator[FakeSlack]:
    async with FakeSlack() as fake:
        yield fake


@pytest.fixture
async def telegram() -> AsyncIterator[FakeTelegram]:
    async with FakeTelegram() as fake:
        yield fake


@pytest.fixture
async def make_gateway(
    bus: Bus, pg_dsn: str, slack: FakeSlack, telegram: FakeTelegram
) -> AsyncIterator[MakeGateway]:
    apps: list[GatewayApp] = []

    async def make(**overrides: Any) -> GatewayApp:
        settings = gateway_settings(pg_dsn, slack.api_url, telegram.base_url, **overrides)
        app = GatewayApp(settings, bus=bus, sweep_interval=0.5)
        await app.start()
        apps.append(app)
        return app

    yield make
    for app in reversed(apps):
        if app._running:
            await app.stop()


@pytest.fixture
async def gateway(make_gateway: MakeGateway) -> GatewayApp:
    return await make_gateway()


@pytest.fixture
async def echo(bus: Bus) -> AsyncIterator[EchoRunner]:
    """Ends every requested run with a summary echoing its conversation and input."""
    runner = EchoRunner(bus)
    await runner.start()
    yield runner
    await runner.stop()
