"""Helpers of the channel-gateway tests: settings on the test's servers and stream readers."""

from __future__ import annotations

from typing import Any

from nats.aio.msg import Msg
from nexus_channel_gateway.config import GatewaySettings
from nexus_events.contract import codec, subjects
from nexus_events.contract.codec import Decoded
from nexus_events.contract.runstate import RunEvent
from nexus_events.contract.streams import CHANNELS, INBOX, RUNS
from nexus_events.events import PairingApproved, RunCompleted, RunRequested, RunResult
from nexus_events.transport.bus import Bus

SIGNING_SECRET = "slack-signing-secret"
TG_SECRET = "tg-secret-token"


def gateway_settings(
    pg_dsn: str, slack_url: str, telegram_url: str, **overrides: Any
) -> GatewaySettings:
    values: dict[str, Any] = {
        "database_url": pg_dsn,
        "gateway_port": 0,
        "health_port": None,
        "fetch_timeout": 0.2,
        "slack_bot_token": "xoxb-test",
        "slack_signing_secret": SIGNING_SECRET,
        "slack_base_url": slack_url,
        "telegram_bot_token": "123:ABC",
        "telegram_secret_token": TG_SECRET,
        "telegram_base_url": telegram_url,
        **overrides,
    }
    return GatewaySettings(**values)


async def pair(bus: Bus, channel: str, user: str) -> None:
    """What `nexus pair approve` publishes: the sender is on the allowlist."""
    await bus.publish(
        subjects.channel_event(channel, "pairing_approved"),
        PairingApproved(user=user, approved_by="test"),
    )


async def events(bus: Bus, stream: str, filter_subject: str) -> list[Decoded]:
    return [d async for d in bus.replay(stream, filter_subject=filter_subject)]


async def run_requests(bus: Bus) -> list[Decoded]:
    return await events(bus, RUNS, subjects.run_events_filter(event="requested"))


async def inbox_of(bus: Bus, run_id: str) -> list[Decoded]:
    return await events(bus, INBOX, subjects.inbox(run_id))


async def channel_events(bus: Bus, event: str) -> list[Decoded]:
    return await events(bus, CHANNELS, subjects.channel_events_filter(event=event))


class EchoRunner:
    """Ends every requested run with a summary echoing its conversation and input."""

    def __init__(self, bus: Bus) -> None:
        self.bus = bus
        self.requests: dict[str, RunRequested] = {}
        self._sub: object = None

    async def start(self) -> None:
        self._sub = await self.bus.nc.subscribe(
            subjects.run_events_filter(None, RunEvent.REQUESTED), cb=self._on
        )

    async def stop(self) -> None:
        if self._sub is not None:
            await self._sub.unsubscribe()  # type: ignore[attr-defined]

    async def _on(self, msg: Msg) -> None:
        d = codec.decode(msg.subject, msg.data, msg.headers)
        run_id = d.address.run_id
        if run_id is None or run_id in self.requests or not isinstance(d.event, RunRequested):
            return
        self.requests[run_id] = d.event
        said = [f"{m.role}: {m.text}" for m in d.event.conversation or []] + [
            f"user: {d.event.input}"
        ]
        done = RunCompleted(result=RunResult(summary="echo[" + " | ".join(said) + "]"))
        await self.bus.publish(subjects.run_event(run_id, RunEvent.COMPLETED), done)
