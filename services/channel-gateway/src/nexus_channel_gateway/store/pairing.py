"""Pairing and the allowlist (``pairing``, ``allowlist``), folded from the pairing events."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from nexus_channel_gateway.store.table_group import TableGroup


@dataclass(frozen=True, slots=True)
class Pairing:
    channel: str
    user: str
    status: str  # approved | pending | expired
    code: str | None
    expires_at: datetime | None
    name: str | None
    seq: int | None  # stream sequence of the approval


class PairingRecords(TableGroup):
    """Who may talk to the gateway, and the pending pairing codes."""

    async def allowed(self, channel: str, user: str) -> bool:
        value = await self.pool.fetchval(
            f"SELECT true FROM {self.s}.allowlist WHERE channel = $1 AND user_id = $2",
            channel,
            user,
        )
        return bool(value)

    async def pending_code(self, channel: str, user: str, now: datetime) -> str | None:
        value = await self.pool.fetchval(
            f"SELECT code FROM {self.s}.pairing WHERE channel = $1 AND user_id = $2"
            " AND state = 'pending' AND expires_at > $3 ORDER BY expires_at DESC LIMIT 1",
            channel,
            user,
            now,
        )
        return None if value is None else str(value)

    async def pending_count(self, channel: str, now: datetime) -> int:
        value = await self.pool.fetchval(
            f"SELECT count(*) FROM {self.s}.pairing WHERE channel = $1"
            " AND state = 'pending' AND expires_at > $2",
            channel,
            now,
        )
        return int(value or 0)

    async def pairing_requested(
        self,
        code: str,
        channel: str,
        user: str,
        conversation: str | None,
        expires_at: datetime,
        *,
        user_name: str | None = None,
    ) -> None:
        await self.pool.execute(
            f"INSERT INTO {self.s}.pairing"
            " (code, channel, user_id, conversation, expires_at, user_name)"
            " VALUES ($1, $2, $3, $4, $5, $6)"
            " ON CONFLICT (code) DO UPDATE SET user_name = coalesce("
            f"{self.s}.pairing.user_name, EXCLUDED.user_name)",
            code,
            channel,
            user,
            conversation,
            expires_at,
            user_name,
        )

    async def pairing_approved(
        self, channel: str, user: str, code: str | None, seq: int | None = None
    ) -> None:
        async with self.pool.acquire() as conn, conn.transaction():
            await conn.execute(
                f"INSERT INTO {self.s}.allowlist (channel, user_id, seq, code)"
                " VALUES ($1, $2, $3, $4) ON CONFLICT (channel, user_id) DO UPDATE SET"
                f" seq = greatest({self.s}.allowlist.seq, EXCLUDED.seq),"
                f" code = coalesce(EXCLUDED.code, {self.s}.allowlist.code)",
                channel,
                user,
                seq,
                code,
            )
            await conn.execute(
                f"UPDATE {self.s}.pairing SET state = 'approved'"
                " WHERE channel = $1 AND user_id = $2 AND state = 'pending'",
                channel,
                user,
            )

    async def pairing_revoked(self, channel: str, user: str) -> None:
        await self.pool.execute(
            f"DELETE FROM {self.s}.allowlist WHERE channel = $1 AND user_id = $2", channel, user
        )

    async def pairings(self, now: datetime, *, include_expired: bool) -> list[Pairing]:
        """The allowlist, then the pending codes of senders not on it (oldest first)."""
        rows = await self.pool.fetch(
            f"SELECT a.channel, a.user_id, a.code, a.seq,"
            f" (SELECT p.user_name FROM {self.s}.pairing p WHERE p.channel = a.channel"
            "   AND p.user_id = a.user_id AND p.user_name IS NOT NULL"
            "   ORDER BY p.expires_at DESC LIMIT 1) AS user_name"
            f" FROM {self.s}.allowlist a ORDER BY a.seq NULLS FIRST, a.channel, a.user_id"
        )
        found = [
            Pairing(
                r["channel"], r["user_id"], "approved", r["code"], None, r["user_name"], r["seq"]
            )
            for r in rows
        ]
        rows = await self.pool.fetch(
            f"SELECT p.code, p.channel, p.user_id, p.expires_at, p.user_name"
            f" FROM {self.s}.pairing p WHERE p.state = 'pending'"
            f" AND NOT EXISTS (SELECT 1 FROM {self.s}.allowlist a"
            "   WHERE a.channel = p.channel AND a.user_id = p.user_id)"
            " AND ($2 OR p.expires_at > $1) ORDER BY p.expires_at",
            now,
            include_expired,
        )
        found += [
            Pairing(
                r["channel"],
                r["user_id"],
                "pending" if r["expires_at"] > now else "expired",
                r["code"],
                r["expires_at"],
                r["user_name"],
                None,
            )
            for r in rows
        ]
        return found
