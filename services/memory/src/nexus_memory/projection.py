"""The memory tables: a projection of NEXUS_MEMORY (schema ``memory``).

`memories` holds one row per memory ever recorded, with its pgvector embedding (HNSW, cosine)
and a generated tsvector (GIN). Nothing is deleted: an update, a duplicate or a contradiction
sets `valid_to` and `superseded_by`; a forget sets `forgotten` and `valid_to`; decay sets
`stale`. `extractions` marks runs whose memories were extracted. `embedder` records which
embedder (and so which dimension) filled the vectors.

Every value comes from the events and their JetStream metadata (time, sequence) and the
embedder is deterministic, so a rebuild (`nexus_events.transport.projection.rebuild`) gives
identical rows. A `recorded` event that carries a secret (published by hand, past the service's
guard) is never projected; the guard consumer erases it from the stream.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from nexus_events.contract.codec import Decoded
from nexus_events.contract.streams import MEMORY
from nexus_events.events import (
    MemoryAccessed,
    MemoryConsolidated,
    MemoryExtracted,
    MemoryForgotten,
    MemoryRecorded,
    MemorySuperseded,
)
from nexus_events.transport.projection import Conn, Source, quote_ident

from nexus_memory.embedding import Embedder
from nexus_memory.guard import SecretGuard

MEMORY_SCHEMA = "memory"


def content_hash(text: str) -> str:
    """Equal for texts that differ only in case and whitespace (exact duplicates)."""
    norm = " ".join(text.lower().split())
    return hashlib.blake2b(norm.encode(), digest_size=16).hexdigest()


def guarded_text(event: MemoryRecorded) -> str:
    """Everything of a `recorded` event the secret guard must see."""
    return "\n".join([event.text, *event.tags, event.key or ""])


class MemoryProjection:
    name = "memory"
    sources: tuple[Source, ...] = (Source(MEMORY),)

    def __init__(
        self, embedder: Embedder, guard: SecretGuard, *, schema: str = MEMORY_SCHEMA
    ) -> None:
        self.embedder = embedder
        self.guard = guard
        self.schema = schema

    async def create(self, conn: Conn, schema: str) -> None:
        q = quote_ident(schema)
        dim = self.embedder.dimension
        await conn.execute(
            f"""CREATE TABLE IF NOT EXISTS {q}.memories (
                memory_id text PRIMARY KEY,
                scope text NOT NULL,
                kind text NOT NULL,
                text text NOT NULL,
                tags text[] NOT NULL DEFAULT '{{}}',
                key text,
                source text NOT NULL,
                source_run_id text,
                redacted boolean NOT NULL DEFAULT false,
                content_hash text NOT NULL,
                embedding vector({dim}) NOT NULL,
                tsv tsvector GENERATED ALWAYS AS (to_tsvector('english', text)) STORED,
                recorded_at timestamptz NOT NULL,
                valid_to timestamptz,
                superseded_by text,
                supersede_reason text,
                stale boolean NOT NULL DEFAULT false,
                forgotten boolean NOT NULL DEFAULT false,
                forget_reason text,
                access_count integer NOT NULL DEFAULT 0,
                last_accessed_at timestamptz,
                seq bigint NOT NULL)"""
        )
        await conn.execute(
            f"CREATE INDEX IF NOT EXISTS memories_embedding ON {q}.memories"
            " USING hnsw (embedding vector_cosine_ops)"
        )
        await conn.execute(
            f"CREATE INDEX IF NOT EXISTS memories_tsv ON {q}.memories USING gin (tsv)"
        )
        await conn.execute(
            f"CREATE INDEX IF NOT EXISTS memories_scope ON {q}.memories (scope, seq)"
        )
        await conn.execute(
            f"CREATE INDEX IF NOT EXISTS memories_key ON {q}.memories (scope, key)"
            " WHERE key IS NOT NULL"
        )
        await conn.execute(
            f"""CREATE TABLE IF NOT EXISTS {q}.extractions (
                run_id text PRIMARY KEY,
                status text NOT NULL,
                memory_ids text[] NOT NULL,
                seq bigint NOT NULL)"""
        )
        await conn.execute(
            f"""CREATE TABLE IF NOT EXISTS {q}.consolidations (
                pass_id text PRIMARY KEY,
                scope text NOT NULL,
                through_seq bigint NOT NULL,
                stale int NOT NULL,
                superseded int NOT NULL,
                at timestamptz NOT NULL)"""
        )
        await conn.execute(
            f"""CREATE TABLE IF NOT EXISTS {q}.embedder (
                id int PRIMARY KEY CHECK (id = 1),
                name text NOT NULL,
                dimension int NOT NULL)"""
        )
        await conn.execute(
            f"INSERT INTO {q}.embedder VALUES (1, $1, $2) ON CONFLICT (id) DO NOTHING",
            self.embedder.name,
            dim,
        )

    async def apply(self, conn: Conn, schema: str, batch: Sequence[Decoded]) -> None:
        q = quote_ident(schema)
        recorded = [
            (d, d.event)
            for d in batch
            if isinstance(d.event, MemoryRecorded)
            and not self.guard.has_secret(guarded_text(d.event))
        ]
        vectors = await self.embedder.embed([e.text for _, e in recorded])
        vector_of = {id(d): vectors[i] for i, (d, _) in enumerate(recorded)}
        for d in batch:
            event, env = d.event, d.envelope
            at = env.timestamp
            seq = env.stream_seq or 0
            if at is None:  # only a message read outside JetStream lacks both
                continue
            match event:
                case MemoryRecorded():
                    vector = vector_of.get(id(d))
                    if vector is not None:
                        await _record(
                            conn, q, d.address.ids["scope"], event, vector=vector, at=at, seq=seq
                        )
                case MemoryForgotten():
                    await conn.execute(
                        f"UPDATE {q}.memories SET forgotten = true, forget_reason = $2,"
                        " valid_to = COALESCE(valid_to, $3) WHERE memory_id = $1",
                        event.memory_id,
                        event.reason,
                        at,
                    )
                case MemorySuperseded():
                    await _supersede(
                        conn,
                        q,
                        [event.memory_id],
                        by=event.by_memory_id,
                        reason=event.reason,
                        at=at,
                    )
                case MemoryAccessed():
                    ids = list(event.counts)
                    await conn.execute(
                        f"UPDATE {q}.memories m SET access_count = access_count + c.n,"
                        " last_accessed_at = $3, stale = false"
                        " FROM unnest($1::text[], $2::int[]) AS c(id, n) WHERE m.memory_id = c.id",
                        ids,
                        [event.counts[i] for i in ids],
                        at,
                    )
                case MemoryConsolidated():
                    await conn.execute(
                        f"UPDATE {q}.memories SET stale = true WHERE memory_id = ANY($1::text[])",
                        event.stale,
                    )
                    await conn.execute(
                        f"INSERT INTO {q}.consolidations VALUES ($1, $2, $3, $4, $5, $6)"
                        " ON CONFLICT (pass_id) DO NOTHING",
                        event.pass_id,
                        d.address.ids["scope"],
                        event.through_seq,
                        len(event.stale),
                        event.superseded,
                        at,
                    )
                case MemoryExtracted():
                    await conn.execute(
                        f"INSERT INTO {q}.extractions VALUES ($1, $2, $3, $4)"
                        " ON CONFLICT (run_id) DO NOTHING",
                        event.run_id,
                        event.status,
                        event.memory_ids,
                        seq,
                    )


async def _record(
    conn: Conn, q: str, scope: str, e: MemoryRecorded, *, vector: Any, at: datetime, seq: int
) -> None:
    inserted = await conn.fetchval(
        f"""INSERT INTO {q}.memories (memory_id, scope, kind, text, tags, key, source,
                source_run_id, redacted, content_hash, embedding, recorded_at, seq)
            VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)
            ON CONFLICT (memory_id) DO NOTHING RETURNING true""",
        e.memory_id,
        scope,
        e.kind,
        e.text,
        e.tags,
        e.key,
        e.source,
        e.source_run_id,
        e.redacted,
        content_hash(e.text),
        vector,
        at,
        seq,
    )
    if not inserted:
        return  # a second `recorded` under the same id: the first one stands
    if e.supersedes:
        await _supersede(conn, q, e.supersedes, by=e.memory_id, reason="updated", at=at)
    if e.key is not None:
        older = await conn.fetch(
            f"SELECT memory_id FROM {q}.memories WHERE scope = $1 AND key = $2"
            " AND valid_to IS NULL AND memory_id <> $3",
            scope,
            e.key,
            e.memory_id,
        )
        if older:
            ids = [r["memory_id"] for r in older]
            await _supersede(conn, q, ids, by=e.memory_id, reason="same_key", at=at)


async def _supersede(
    conn: Conn, q: str, ids: list[str], *, by: str | None, reason: str, at: datetime
) -> None:
    await conn.execute(
        f"UPDATE {q}.memories SET valid_to = $4, superseded_by = $2, supersede_reason = $3"
        " WHERE memory_id = ANY($1::text[]) AND valid_to IS NULL",
        ids,
        by,
        reason,
        at,
    )
