"""The ledger of run ids core has seen (schema `core_assembly`): who claimed a run id with
which request, and how assembly ended. It is what makes run assembly idempotent and lets a
second request for an existing run id be told apart from a redelivery of the first."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import asyncpg
from nexus_events.transport.projection import quote_ident

from nexus_core.migrations import migrate

ASSEMBLY_SCHEMA = "core_assembly"

MIGRATIONS = (
    """
    CREATE TABLE {schema}.run_requests (
        run_id text PRIMARY KEY,
        fingerprint text NOT NULL,
        request_event_id text NOT NULL,
        request_seq bigint,
        outcome text NOT NULL DEFAULT 'pending',
        reason text,
        created_at timestamptz NOT NULL DEFAULT now(),
        updated_at timestamptz NOT NULL DEFAULT now());
    """,
)

Outcome = Literal["pending", "prepared", "failed"]


@dataclass(frozen=True)
class Claim:
    """Result of claiming a run id: `fresh` (ours to assemble), `duplicate` (same request,
    `outcome` says how far it got) or `conflict` (another request owns the id)."""

    kind: Literal["fresh", "duplicate", "conflict"]
    outcome: Outcome = "pending"


class RunRequestStore:
    def __init__(self, pool: asyncpg.Pool[Any], schema: str = ASSEMBLY_SCHEMA) -> None:
        self.pool = pool
        self.schema = schema
        self.q = quote_ident(schema)

    async def migrate(self) -> None:
        async with self.pool.acquire() as conn:
            await migrate(conn, self.schema, MIGRATIONS)

    async def claim(self, run_id: str, fingerprint: str, event_id: str, seq: int | None) -> Claim:
        # A concurrent claim of the same id can commit between the statement's snapshot and
        # its insert; the row is then invisible to this statement, so ask again.
        for _ in range(3):
            row = await self.pool.fetchrow(
                f"WITH ins AS (INSERT INTO {self.q}.run_requests"
                " (run_id, fingerprint, request_event_id, request_seq) VALUES ($1, $2, $3, $4)"
                " ON CONFLICT (run_id) DO NOTHING RETURNING fingerprint, outcome, true AS fresh)"
                " SELECT * FROM ins UNION ALL"
                f" SELECT fingerprint, outcome, false FROM {self.q}.run_requests WHERE run_id = $1"
                " AND NOT EXISTS (SELECT 1 FROM ins)",
                run_id,
                fingerprint,
                event_id,
                seq,
            )
            if row is not None:
                break
        else:
            raise RuntimeError(f"cannot claim run id {run_id!r}")
        if row["fresh"]:
            return Claim("fresh")
        if row["fingerprint"] != fingerprint:
            return Claim("conflict", row["outcome"])
        return Claim("duplicate", row["outcome"])

    async def finish(self, run_id: str, outcome: Outcome, reason: str | None = None) -> None:
        await self.pool.execute(
            f"UPDATE {self.q}.run_requests SET outcome = $2, reason = $3, updated_at = now()"
            " WHERE run_id = $1",
            run_id,
            outcome,
            reason,
        )
