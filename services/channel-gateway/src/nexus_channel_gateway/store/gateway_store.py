"""`GatewayStore`: the gateway's one handle on its PostgreSQL schema, combining the table groups."""

from __future__ import annotations

from typing import Any

import asyncpg
from nexus_events.transport.projection import quote_ident

from nexus_channel_gateway.store.approvals import ApprovalRecords
from nexus_channel_gateway.store.conversations import ConversationRecords
from nexus_channel_gateway.store.delegations import DelegationRecords
from nexus_channel_gateway.store.flows import FlowRecords
from nexus_channel_gateway.store.inbound import InboundRecords
from nexus_channel_gateway.store.pairing import PairingRecords
from nexus_channel_gateway.store.schema import CHANNELS_SCHEMA, MIGRATION
from nexus_channel_gateway.store.sends import SendRecords
from nexus_channel_gateway.store.threads import ThreadRecords


class GatewayStore(
    InboundRecords,
    ThreadRecords,
    ApprovalRecords,
    FlowRecords,
    SendRecords,
    DelegationRecords,
    PairingRecords,
    ConversationRecords,
):
    """PostgreSQL access of the gateway; `migrate()` once at start-up."""

    def __init__(self, pool: asyncpg.Pool[Any], schema: str = CHANNELS_SCHEMA) -> None:
        self.pool = pool
        self.s = quote_ident(schema)

    async def migrate(self) -> None:
        # Two gateways starting at once must not race on CREATE ... IF NOT EXISTS.
        async with self.pool.acquire() as conn, conn.transaction():
            await conn.execute("SELECT pg_advisory_xact_lock(hashtext('nexus-channels'))")
            await conn.execute(MIGRATION.format(s=self.s))
