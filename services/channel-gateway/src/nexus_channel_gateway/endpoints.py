"""The `nexus-channel-gateway` nats.micro service: ``nexus.channels.v1.pairings``, the
allowlist and pairing codes from the gateway's tables (which outlive NEXUS_CHANNELS' 7 days)."""

from __future__ import annotations

import functools
from datetime import UTC, datetime

from nats.micro.service import Service
from nexus_events.contract import subjects
from nexus_events.events import PairingsReply, PairingsRequest, PairingView
from nexus_events.transport import micro
from nexus_events.transport.bus import Bus

from nexus_channel_gateway.store import GatewayStore

SERVICE_NAME = "nexus-channel-gateway"

endpoint_handler = functools.partial(micro.endpoint_handler, service="channel-gateway")


class GatewayEndpoints:
    def __init__(self, bus: Bus, store: GatewayStore) -> None:
        self.bus = bus
        self.store = store
        self.service: Service | None = None

    async def start(self) -> None:
        endpoints: list[tuple[str, str, micro.Handler]] = [
            (
                "pairings",
                subjects.CHANNEL_PAIRINGS,
                endpoint_handler(PairingsRequest, self.pairings),
            ),
        ]
        self.service = await micro.start_service(
            self.bus.nc,
            SERVICE_NAME,
            "Nexus channel gateway: the chat allowlist and pairing codes",
            endpoints,
        )

    async def stop(self) -> None:
        await micro.stop_service(self.service)
        self.service = None

    async def pairings(self, request: PairingsRequest) -> PairingsReply:
        rows = await self.store.pairings(datetime.now(UTC), include_expired=request.include_expired)
        return PairingsReply(
            pairings=[
                PairingView(
                    channel=p.channel,
                    user=p.user,
                    status=p.status,
                    code=p.code,
                    expires_at=p.expires_at,
                    name=p.name,
                    seq=p.seq,
                )
                for p in rows
            ]
        )
