"""Send records (``sends``): one row per outbound idempotency key, so a message is posted once."""

from __future__ import annotations

from nexus_channel_gateway.store.table_group import TableGroup


class SendRecords(TableGroup):
    """'sending' before the platform call, 'sent' after."""

    async def send_state(self, key: str) -> tuple[str, str | None] | None:
        row = await self.pool.fetchrow(
            f"SELECT state, platform_id FROM {self.s}.sends WHERE key = $1", key
        )
        return None if row is None else (row["state"], row["platform_id"])

    async def mark_sending(self, key: str) -> None:
        await self.pool.execute(
            f"INSERT INTO {self.s}.sends (key, state) VALUES ($1, 'sending')"
            " ON CONFLICT (key) DO NOTHING",
            key,
        )

    async def clear_sending(self, key: str) -> None:
        """The platform refused before posting (e.g. 429): a later try may post."""
        await self.pool.execute(
            f"DELETE FROM {self.s}.sends WHERE key = $1 AND state = 'sending'", key
        )

    async def mark_sent(self, key: str, platform_id: str | None, state: str = "sent") -> None:
        await self.pool.execute(
            f"INSERT INTO {self.s}.sends (key, state, platform_id) VALUES ($1, $2, $3)"
            " ON CONFLICT (key) DO UPDATE SET state = $2, platform_id = $3, updated_at = now()",
            key,
            state,
            platform_id,
        )
