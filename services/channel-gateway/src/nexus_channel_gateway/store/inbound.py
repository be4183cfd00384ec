"""Inbound outbox and dedupe keys (``inbound``, ``inbound_alias``): a verified message is kept
until published, and a platform's retry under any of its keys is accepted once."""

from __future__ import annotations

import json

from nexus_events.contract.codec import Encoded

from nexus_channel_gateway.store.table_group import TableGroup


class InboundRecords(TableGroup):
    """The inbound outbox: accept once, publish, find what is left to publish."""

    async def accept(self, enc: Encoded, key: str, aliases: tuple[str, ...] = ()) -> bool:
        """Persist a verified inbound message under `key` (and its second keys); False if any
        key was seen before (a platform retry: already accepted, never processed twice)."""
        if not aliases:
            # One statement, one round trip (autocommit): the common webhook case.
            inserted = await self.pool.fetchval(
                f"INSERT INTO {self.s}.inbound (key, subject, body, headers)"
                " VALUES ($1, $2, $3, $4::jsonb) ON CONFLICT DO NOTHING RETURNING true",
                key,
                enc.subject,
                enc.body,
                json.dumps(enc.headers),
            )
            return bool(inserted)
        async with self.pool.acquire() as conn:
            tx = conn.transaction()
            await tx.start()
            try:
                fresh = await conn.fetchval(
                    f"INSERT INTO {self.s}.inbound (key, subject, body, headers)"
                    " VALUES ($1, $2, $3, $4::jsonb) ON CONFLICT DO NOTHING RETURNING true",
                    key,
                    enc.subject,
                    enc.body,
                    json.dumps(enc.headers),
                )
                for alias in aliases if fresh else ():
                    fresh = await conn.fetchval(
                        f"INSERT INTO {self.s}.inbound_alias (alias, key) VALUES ($1, $2)"
                        " ON CONFLICT DO NOTHING RETURNING true",
                        alias,
                        key,
                    )
                    if not fresh:
                        break  # seen under another id: roll this row back too
            except BaseException:
                await tx.rollback()
                raise
            if not fresh:
                await tx.rollback()
                return False
            await tx.commit()
        return True

    async def mark_published(self, keys: list[str]) -> None:
        await self.pool.execute(
            f"UPDATE {self.s}.inbound SET published_at = now() WHERE key = ANY($1::text[])", keys
        )

    async def unpublished(self, limit: int = 500) -> list[tuple[str, Encoded]]:
        rows = await self.pool.fetch(
            f"SELECT key, subject, body, headers FROM {self.s}.inbound"
            " WHERE published_at IS NULL ORDER BY received_at LIMIT $1",
            limit,
        )
        return [
            (r["key"], Encoded(r["subject"], bytes(r["body"]), json.loads(r["headers"])))
            for r in rows
        ]
