"""Run origins and posts (``origins``, ``posts``): which chat thread a run answers to, and which
run a reply in a thread reaches."""

from __future__ import annotations

from nexus_events.events import ChannelAddress

from nexus_channel_gateway.store.table_group import TableGroup


class ThreadRecords(TableGroup):
    """Where a run was asked from and the messages posted about it."""

    async def remember_origin(self, run_id: str, address: ChannelAddress) -> None:
        await self.pool.execute(
            f"INSERT INTO {self.s}.origins (run_id, channel, conversation, thread)"
            " VALUES ($1, $2, $3, $4) ON CONFLICT (run_id) DO NOTHING",
            run_id,
            address.channel,
            address.conversation,
            address.thread,
        )

    async def origin(self, run_id: str) -> ChannelAddress | None:
        row = await self.pool.fetchrow(
            f"SELECT channel, conversation, thread FROM {self.s}.origins WHERE run_id = $1", run_id
        )
        return None if row is None else ChannelAddress(**dict(row))

    async def run_in_thread(self, channel: str, conversation: str, thread: str) -> str | None:
        """The run whose progress lives in this thread (a reply there goes to its inbox)."""
        value = await self.pool.fetchval(
            f"SELECT run_id FROM {self.s}.origins"
            " WHERE channel = $1 AND conversation = $2 AND thread = $3"
            f" UNION ALL SELECT run_id FROM {self.s}.posts"
            " WHERE channel = $1 AND conversation = $2 AND platform_id = $3 LIMIT 1",
            channel,
            conversation,
            thread,
        )
        return None if value is None else str(value)

    async def remember_post(
        self, channel: str, conversation: str, platform_id: str, run_id: str
    ) -> None:
        await self.pool.execute(
            f"INSERT INTO {self.s}.posts (channel, conversation, platform_id, run_id)"
            " VALUES ($1, $2, $3, $4) ON CONFLICT DO NOTHING",
            channel,
            conversation,
            platform_id,
            run_id,
        )
