"""The gateway's PostgreSQL schema (``channels``): inbound outbox and dedupe keys, run origins,
relayed approvals, send records, the allowlist folded from pairing events, and the flow runs
asked from chat with their gates (``flows``, ``flow_gates``).

Every write is idempotent (ON CONFLICT), so a redelivered event changes nothing twice.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import asyncpg
from nexus_events.codec import Encoded
from nexus_events.events import ChannelAddress
from nexus_events.projection import quote_ident

CHANNELS_SCHEMA = "channels"

_MIGRATION = """
CREATE SCHEMA IF NOT EXISTS {s};
-- Verified inbound requests, kept until published (an outbox: a crash between the 2xx and
-- the JetStream ack is recovered at start-up). `key` is the Nats-Msg-Id.
CREATE TABLE IF NOT EXISTS {s}.inbound (
    key text PRIMARY KEY,
    subject text NOT NULL,
    body bytea NOT NULL,
    headers jsonb NOT NULL,
    received_at timestamptz NOT NULL DEFAULT now(),
    published_at timestamptz
);
CREATE INDEX IF NOT EXISTS inbound_unpublished ON {s}.inbound (received_at)
    WHERE published_at IS NULL;
-- Second keys of one inbound message (a platform resending it under a new delivery id).
CREATE TABLE IF NOT EXISTS {s}.inbound_alias (
    alias text PRIMARY KEY,
    key text NOT NULL
);
CREATE TABLE IF NOT EXISTS {s}.origins (
    run_id text PRIMARY KEY,
    channel text NOT NULL,
    conversation text NOT NULL,
    thread text
);
CREATE INDEX IF NOT EXISTS origins_thread ON {s}.origins (channel, conversation, thread);
-- Messages the gateway posted about a run: a reply to one of them (Telegram) reaches the run.
CREATE TABLE IF NOT EXISTS {s}.posts (
    channel text NOT NULL,
    conversation text NOT NULL,
    platform_id text NOT NULL,
    run_id text NOT NULL,
    PRIMARY KEY (channel, conversation, platform_id)
);
CREATE TABLE IF NOT EXISTS {s}.approvals (
    short_id text PRIMARY KEY,
    run_id text NOT NULL,
    approval_id text NOT NULL,
    channel text NOT NULL,
    conversation text NOT NULL,
    thread text,
    UNIQUE (run_id, approval_id)
);
-- One row per outbound idempotency key: 'sending' before the platform call, 'sent' after.
CREATE TABLE IF NOT EXISTS {s}.sends (
    key text PRIMARY KEY,
    state text NOT NULL,
    platform_id text,
    updated_at timestamptz NOT NULL DEFAULT now()
);
-- Child runs requested by a delegation: where their ending goes, and the chain of agents
-- from the root run (the cycle guard and the depth limit read it).
CREATE TABLE IF NOT EXISTS {s}.delegations (
    child_run_id text PRIMARY KEY,
    parent_run_id text,
    reply_to text,
    correlation_id text NOT NULL,
    chain text[] NOT NULL
);
CREATE TABLE IF NOT EXISTS {s}.allowlist (
    channel text NOT NULL,
    user_id text NOT NULL,
    PRIMARY KEY (channel, user_id)
);
CREATE TABLE IF NOT EXISTS {s}.pairing (
    code text PRIMARY KEY,
    channel text NOT NULL,
    user_id text NOT NULL,
    conversation text,
    expires_at timestamptz NOT NULL,
    state text NOT NULL DEFAULT 'pending'
);
-- What `nexus pair ls` shows beyond the stream's retention: the sender's name, and the stream
-- sequence of the approval (a revocation's Nats-Msg-Id carries it).
ALTER TABLE {s}.pairing ADD COLUMN IF NOT EXISTS user_name text;
ALTER TABLE {s}.allowlist ADD COLUMN IF NOT EXISTS seq bigint;
ALTER TABLE {s}.allowlist ADD COLUMN IF NOT EXISTS code text;
-- How many delegated runs lead from the root run to this child, the child included (1 for a
-- root run's child). Rows from before it have NULL: their chain length stands in.
ALTER TABLE {s}.delegations ADD COLUMN IF NOT EXISTS depth integer;
-- Flow runs: the thread that asked (NULL: not asked from chat), who asked, and each gate
-- step's approvers from the pinned definition (step id -> principals).
CREATE TABLE IF NOT EXISTS {s}.flows (
    flow_run_id text PRIMARY KEY,
    flow text,
    channel text,
    conversation text,
    thread text,
    requested_by text,
    origin text,
    approvers jsonb NOT NULL DEFAULT '{{}}'
);
-- A gate's pseudo-run (where its approval is answered) and the flow run and step it is of.
CREATE TABLE IF NOT EXISTS {s}.flow_gates (
    gate_run_id text PRIMARY KEY,
    flow_run_id text NOT NULL,
    step text NOT NULL
);
-- Open from the gate's `waiting` until the step is resumed or the flow ends.
ALTER TABLE {s}.flow_gates ADD COLUMN IF NOT EXISTS open boolean NOT NULL DEFAULT true;
"""


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


@dataclass(frozen=True, slots=True)
class FlowRun:
    """A flow run as the gateway knows it: where it was asked (None: not from chat), by
    whom, and its gates' approvers (`GateStep.approvers`, by step)."""

    flow_run_id: str
    flow: str | None
    origin: ChannelAddress | None
    requested_by: str | None
    origin_surface: str | None
    approvers: dict[str, list[str]]


def _flow_run(row: asyncpg.Record) -> FlowRun:
    origin = None
    if row["channel"] is not None and row["conversation"] is not None:
        origin = ChannelAddress(
            channel=row["channel"], conversation=row["conversation"], thread=row["thread"]
        )
    raw = row["approvers"]
    approvers = json.loads(raw) if isinstance(raw, str) else dict(raw or {})
    return FlowRun(
        row["flow_run_id"], row["flow"], origin, row["requested_by"], row["origin"], approvers
    )


@dataclass(frozen=True, slots=True)
class Pairing:
    channel: str
    user: str
    status: str  # approved | pending | expired
    code: str | None
    expires_at: datetime | None
    name: str | None
    seq: int | None  # stream sequence of the approval


@dataclass(frozen=True, slots=True)
class Delegation:
    child_run_id: str
    parent_run_id: str | None
    reply_to: str | None
    correlation_id: str
    chain: tuple[str, ...]  # agents from the root run to the child (the root's when known)
    depth: int  # delegated runs from the root run to the child, the child included


class GatewayStore:
    """PostgreSQL access of the gateway; `migrate()` once at start-up."""

    def __init__(self, pool: asyncpg.Pool[Any], schema: str = CHANNELS_SCHEMA) -> None:
        self.pool = pool
        self.s = quote_ident(schema)

    async def migrate(self) -> None:
        # Two gateways starting at once must not race on CREATE ... IF NOT EXISTS.
        async with self.pool.acquire() as conn, conn.transaction():
            await conn.execute("SELECT pg_advisory_xact_lock(hashtext('nexus-channels'))")
            await conn.execute(_MIGRATION.format(s=self.s))

    # -- inbound ---------------------------------------------------------------------------

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

    # -- origins and threads ------------------------------------------------------------------

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

    # -- approvals ------------------------------------------------------------------------------

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

    # -- flows -------------------------------------------------------------------------------

    async def flow_requested(
        self,
        flow_run_id: str,
        flow: str,
        origin: ChannelAddress | None,
        requested_by: str | None,
        origin_surface: str,
    ) -> None:
        where = (None, None, None) if origin is None else (
            origin.channel, origin.conversation, origin.thread
        )  # fmt: skip
        await self.pool.execute(
            f"INSERT INTO {self.s}.flows (flow_run_id, flow, channel, conversation, thread,"
            " requested_by, origin) VALUES ($1, $2, $3, $4, $5, $6, $7)"
            # The first request wins (a repeat under the same id changes nothing).
            " ON CONFLICT (flow_run_id) DO UPDATE SET"
            f" channel = coalesce({self.s}.flows.channel, EXCLUDED.channel),"
            f" conversation = coalesce({self.s}.flows.conversation, EXCLUDED.conversation),"
            f" thread = coalesce({self.s}.flows.thread, EXCLUDED.thread),"
            f" requested_by = coalesce({self.s}.flows.requested_by, EXCLUDED.requested_by),"
            f" origin = coalesce({self.s}.flows.origin, EXCLUDED.origin)",
            flow_run_id, flow, *where, requested_by, origin_surface,
        )  # fmt: skip

    async def flow_accepted(
        self, flow_run_id: str, flow: str, approvers: dict[str, list[str]]
    ) -> None:
        await self.pool.execute(
            f"INSERT INTO {self.s}.flows (flow_run_id, flow, approvers) VALUES ($1, $2, $3::jsonb)"
            f" ON CONFLICT (flow_run_id) DO UPDATE SET approvers = EXCLUDED.approvers,"
            f" flow = coalesce({self.s}.flows.flow, EXCLUDED.flow)",
            flow_run_id, flow, json.dumps(approvers),
        )  # fmt: skip

    async def flow(self, flow_run_id: str) -> FlowRun | None:
        row = await self.pool.fetchrow(
            f"SELECT * FROM {self.s}.flows WHERE flow_run_id = $1", flow_run_id
        )
        return None if row is None else _flow_run(row)

    async def gate_opened(self, gate_run_id: str, flow_run_id: str, step: str) -> None:
        async with self.pool.acquire() as conn, conn.transaction():
            # A flow asked elsewhere (no `requested` seen here) still gets a row to join.
            await conn.execute(
                f"INSERT INTO {self.s}.flows (flow_run_id) VALUES ($1) ON CONFLICT DO NOTHING",
                flow_run_id,
            )
            await conn.execute(
                f"INSERT INTO {self.s}.flow_gates (gate_run_id, flow_run_id, step)"
                " VALUES ($1, $2, $3) ON CONFLICT DO NOTHING",
                gate_run_id, flow_run_id, step,
            )  # fmt: skip

    async def gate(self, gate_run_id: str) -> tuple[FlowRun, str] | None:
        """The flow run and step a gate's pseudo-run belongs to (None: not a known gate)."""
        row = await self.pool.fetchrow(
            f"SELECT f.*, g.step FROM {self.s}.flow_gates g"
            f" JOIN {self.s}.flows f USING (flow_run_id) WHERE g.gate_run_id = $1",
            gate_run_id,
        )
        return None if row is None else (_flow_run(row), str(row["step"]))

    async def close_gates(self, flow_run_id: str, step: str | None = None) -> None:
        """The flow run's gates (of `step`; None: all) wait no more."""
        await self.pool.execute(
            f"UPDATE {self.s}.flow_gates SET open = false WHERE flow_run_id = $1"
            " AND ($2::text IS NULL OR step = $2)",
            flow_run_id,
            step,
        )

    async def gate_closed(self, gate_run_id: str) -> bool:
        """True for a known gate that no longer waits (False: open, or not a gate)."""
        value = await self.pool.fetchval(
            f"SELECT NOT open FROM {self.s}.flow_gates WHERE gate_run_id = $1", gate_run_id
        )
        return bool(value)

    # -- sends -------------------------------------------------------------------------------------

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

    # -- delegations ---------------------------------------------------------------------------

    async def record_delegation(self, d: Delegation) -> None:
        await self.pool.execute(
            f"INSERT INTO {self.s}.delegations"
            " (child_run_id, parent_run_id, reply_to, correlation_id, chain, depth)"
            " VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (child_run_id) DO NOTHING",
            d.child_run_id,
            d.parent_run_id,
            d.reply_to,
            d.correlation_id,
            list(d.chain),
            d.depth,
        )

    async def delegation(self, child_run_id: str) -> Delegation | None:
        row = await self.pool.fetchrow(
            f"SELECT * FROM {self.s}.delegations WHERE child_run_id = $1", child_run_id
        )
        if row is None:
            return None
        return Delegation(
            row["child_run_id"],
            row["parent_run_id"],
            row["reply_to"],
            row["correlation_id"],
            tuple(row["chain"]),
            row["depth"] if row["depth"] is not None else len(row["chain"]),
        )

    # -- pairing and the allowlist -----------------------------------------------------------

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
