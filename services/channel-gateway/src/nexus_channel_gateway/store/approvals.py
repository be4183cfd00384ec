"""Relayed approvals (``approvals``): the short id a chat answers an approval with."""

from __future__ import annotations

from dataclasses import dataclass

import asyncpg
from nexus_events.events import ChannelAddress

from nexus_channel_gateway.store.table_group import TableGroup


@dataclass(frozen=True, slots=True)
class RelayedApproval:
    short_id: str
    run_id: str
    approval_id: str
    address: ChannelAddress


def _relayed(row: asyncpg.Record | None) -> RelayedApproval | None:
    if row is None:
        return None
    return RelayedApproval(
        row["short_id"],
        row["run_id"],
        row["approval_id"],
        ChannelAddress(
            channel=row["channel"], conversation=row["conversation"], thread=row["thread"]
        ),
    )


class ApprovalRecords(TableGroup):
    """Approvals posted to a chat, by short id and by run and approval id."""

    async def relay_approval(
        self, short_id: str, run_id: str, approval_id: str, address: ChannelAddress
    ) -> str:
        """Record the short id of an approval; returns the short id in force (a redelivery
        keeps the first one)."""
        async with self.pool.acquire() as conn, conn.transaction():
            held = await conn.fetchval(
                f"SELECT short_id FROM {self.s}.approvals WHERE run_id = $1 AND approval_id = $2",
                run_id,
                approval_id,
            )
            if held is not None:
                return str(held)
            await conn.execute(
                f"INSERT INTO {self.s}.approvals"
                " (short_id, run_id, approval_id, channel, conversation, thread)"
                " VALUES ($1, $2, $3, $4, $5, $6)",
                short_id,
                run_id,
                approval_id,
                address.channel,
                address.conversation,
                address.thread,
            )
        return short_id

    async def approval(self, short_id: str) -> RelayedApproval | None:
        row = await self.pool.fetchrow(
            f"SELECT * FROM {self.s}.approvals WHERE short_id = $1", short_id
        )
        return _relayed(row)

    async def relayed(self, run_id: str, approval_id: str) -> RelayedApproval | None:
        """The relay record of one approval (None: it was never posted to a chat)."""
        row = await self.pool.fetchrow(
            f"SELECT * FROM {self.s}.approvals WHERE run_id = $1 AND approval_id = $2",
            run_id,
            approval_id,
        )
        return _relayed(row)
