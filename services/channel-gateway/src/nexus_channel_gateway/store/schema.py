"""The gateway's PostgreSQL schema (``channels``) as one idempotent migration: every table group's
CREATE and ALTER statements, in the order they were added."""

from __future__ import annotations

CHANNELS_SCHEMA = "channels"

MIGRATION = """
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
-- Conversations (docs/channels.md): folded from conversation_turn|answered|ended.
CREATE TABLE IF NOT EXISTS {s}.conversations (
    conversation_id text PRIMARY KEY,
    channel text NOT NULL,
    conversation text NOT NULL,
    thread text NOT NULL,
    agent_id text NOT NULL,
    messages jsonb NOT NULL,
    live_run text,
    last_activity timestamptz NOT NULL,
    ended boolean NOT NULL DEFAULT false
);
CREATE INDEX IF NOT EXISTS conversations_idle ON {s}.conversations (last_activity)
    WHERE NOT ended;
"""
