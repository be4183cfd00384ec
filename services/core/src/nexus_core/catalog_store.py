"""The revisioned catalog store: agent, skill and flow definitions in PostgreSQL JSONB
(schema `core`).

`CatalogProjection` follows NEXUS_CATALOG through the foundation's `ProjectionRunner`, so every
applied event is stored exactly once together with its checkpoint, and `rebuild` gives the
same revisions. Each item has a revision counter: every apply that changes the definition and
every delete adds a revision; re-applying an identical definition adds nothing. History is
never deleted. `PgCatalogStore` is the read side used by run assembly and queries.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal, Protocol, TypeVar

import asyncpg
from nexus_events.contract.codec import Decoded
from nexus_events.contract.streams import CATALOG
from nexus_events.events import (
    AgentApplied,
    AgentDefinition,
    AgentDeleted,
    FlowApplied,
    FlowDefinition,
    FlowDeleted,
    SkillApplied,
    SkillDefinition,
    SkillDeleted,
)
from nexus_events.transport.projection import Source, quote_ident

from nexus_core.canary import canary_refusal
from nexus_core.migrations import Conn, migrate
from nexus_core.tracing import CATALOG_ITEM, spans_for

log = logging.getLogger(__name__)

D = TypeVar("D", AgentDefinition, SkillDefinition, FlowDefinition)

CATALOG_SCHEMA = "core"

MIGRATIONS = (
    """
    CREATE TABLE {schema}.agents (
        id text PRIMARY KEY,
        revision int NOT NULL,
        deleted boolean NOT NULL,
        definition jsonb,
        updated_seq bigint NOT NULL,
        updated_at timestamptz);
    CREATE TABLE {schema}.agent_revisions (
        id text NOT NULL,
        revision int NOT NULL,
        deleted boolean NOT NULL,
        definition jsonb,
        changed_by text,
        stream_seq bigint NOT NULL,
        changed_at timestamptz,
        PRIMARY KEY (id, revision));
    CREATE TABLE {schema}.skills (
        name text PRIMARY KEY,
        revision int NOT NULL,
        deleted boolean NOT NULL,
        version text,
        definition jsonb,
        reset_revision int NOT NULL DEFAULT 0,
        updated_seq bigint NOT NULL,
        updated_at timestamptz);
    CREATE TABLE {schema}.skill_revisions (
        name text NOT NULL,
        revision int NOT NULL,
        deleted boolean NOT NULL,
        version text,
        definition jsonb,
        changed_by text,
        stream_seq bigint NOT NULL,
        changed_at timestamptz,
        PRIMARY KEY (name, revision));
    CREATE INDEX ON {schema}.skill_revisions (name, version, revision);
    """,
    # Flow definitions (issue 28): kept like agents; a flow run pins one revision.
    """
    CREATE TABLE {schema}.flows (
        id text PRIMARY KEY,
        revision int NOT NULL,
        deleted boolean NOT NULL,
        definition jsonb,
        updated_seq bigint NOT NULL,
        updated_at timestamptz);
    CREATE TABLE {schema}.flow_revisions (
        id text NOT NULL,
        revision int NOT NULL,
        deleted boolean NOT NULL,
        definition jsonb,
        changed_by text,
        stream_seq bigint NOT NULL,
        changed_at timestamptz,
        PRIMARY KEY (id, revision));
    """,
)


@dataclass(frozen=True)
class StoredAgent:
    definition: AgentDefinition
    revision: int
    updated_at: datetime | None


@dataclass(frozen=True)
class StoredFlow:
    definition: FlowDefinition
    revision: int
    updated_at: datetime | None


@dataclass(frozen=True)
class StoredSkill:
    skill: SkillDefinition
    revision: int
    updated_at: datetime | None


class CatalogStore(Protocol):
    """Read side of the catalog, whatever the backend."""

    async def get_agent(self, agent_id: str, revision: int | None = None) -> StoredAgent | None:
        """The current definition, or None if never applied or deleted; with `revision`, that
        revision even if deleted since, None if it does not exist or is the delete itself."""

    async def get_skill(self, name: str, version: str | None = None) -> StoredSkill | None:
        """The latest revision of `name` (with `version`, the latest of that version)."""

    async def list_agents(self) -> list[StoredAgent]: ...

    async def list_skills(self) -> list[StoredSkill]: ...

    async def agent_history(self, agent_id: str) -> list[tuple[int, bool, AgentDefinition | None]]:
        """Every revision of an agent, oldest first: (revision, deleted, definition)."""

    async def skill_history(self, name: str) -> list[tuple[int, bool, SkillDefinition | None]]:
        """Every revision of a skill, oldest first: (revision, deleted, definition)."""

    async def get_flow(self, flow_id: str, revision: int | None = None) -> StoredFlow | None:
        """The current definition (None if never applied or deleted); with `revision`, that
        revision even if the flow was deleted since (a run pinned to it reads it), None if it
        does not exist or is the delete itself."""

    async def list_flows(self) -> list[StoredFlow]: ...

    async def flow_history(self, flow_id: str) -> list[tuple[int, bool, FlowDefinition | None]]:
        """Every revision of a flow, oldest first: (revision, deleted, definition)."""


# Per kind: (current table, revision table, key column).
_TABLES = {
    "agent": ("agents", "agent_revisions", "id"),
    "skill": ("skills", "skill_revisions", "name"),
    "flow": ("flows", "flow_revisions", "id"),
}


class CatalogProjection:
    """Writes catalog events into the revisioned tables of `schema`."""

    name = "catalog"
    sources: tuple[Source, ...] = (Source(CATALOG),)

    def __init__(self, schema: str = CATALOG_SCHEMA) -> None:
        self.schema = schema

    async def create(self, conn: Conn, schema: str) -> None:
        await migrate(conn, schema, MIGRATIONS)

    async def apply(self, conn: Conn, schema: str, batch: Sequence[Decoded]) -> None:
        q = quote_ident(schema)
        spans = spans_for("core project catalog")
        for d in batch:
            with spans(d, {CATALOG_ITEM: d.address.ids.get("id", "")}):
                await self._apply_one(conn, q, d)

    async def _apply_one(self, conn: Conn, q: str, d: Decoded) -> None:
        change = catalog_change(d)
        if change is not None and change.canary_revision is not None:
            latest = await conn.fetchval(
                f"SELECT revision FROM {q}.agents WHERE id = $1", change.item_id
            )
            live = await conn.fetchval(
                f"SELECT NOT deleted FROM {q}.agent_revisions WHERE id = $1 AND revision = $2",
                change.item_id,
                change.canary_revision,
            )
            refusal = canary_refusal(
                change.item_id, change.seq, change.canary_revision, latest or 0, bool(live)
            )
            if refusal is not None:
                log.warning("%s", refusal)
                return
        if change is not None:
            table, history, key = _TABLES[change.kind]
            await _change(
                conn,
                q,
                table,
                history,
                key,
                change.item_id,
                change.body,
                change.version,
                change.by,
                change.seq,
                change.at,
            )


@dataclass(frozen=True)
class CatalogChange:
    """What one catalog event asks of any backend: `body` None means delete."""

    kind: Literal["agent", "skill", "flow"]
    item_id: str
    body: str | None
    version: str | None
    by: str | None
    seq: int
    at: datetime | None
    # An agent's canary: the candidate revision it names (checked against the history).
    canary_revision: int | None = None


def catalog_change(d: Decoded) -> CatalogChange | None:  # noqa: PLR0911 - one per event kind
    """The change a decoded catalog event asks for, or None if it asks for nothing valid.

    A definition that breaks the contract (a flow with a bad expression or an unbounded loop,
    say one published by hand) never gets here: it does not decode, so the follower
    dead-letters it with the validation error and goes on."""
    item_id = d.address.ids.get("id", "")
    event = d.event
    seq = d.envelope.stream_seq or 0
    at = d.envelope.timestamp
    if isinstance(event, AgentApplied):
        if event.definition.id != item_id:
            log.warning("agent %r applied on subject of %r: skipped", event.definition.id, item_id)
            return None
        body = event.definition.model_dump_json()
        canary = event.definition.canary
        return CatalogChange(
            "agent",
            item_id,
            body,
            None,
            event.applied_by,
            seq,
            at,
            canary_revision=None if canary is None else canary.revision,
        )
    if isinstance(event, AgentDeleted):
        return CatalogChange("agent", item_id, None, None, event.deleted_by, seq, at)
    if isinstance(event, SkillApplied):
        if event.skill.name != item_id:
            log.warning("skill %r applied on subject of %r: skipped", event.skill.name, item_id)
            return None
        body = event.skill.model_dump_json()
        return CatalogChange("skill", item_id, body, event.skill.version, event.applied_by, seq, at)
    if isinstance(event, SkillDeleted):
        return CatalogChange("skill", item_id, None, None, event.deleted_by, seq, at)
    if isinstance(event, FlowApplied):
        if event.definition.id != item_id:
            log.warning("flow %r applied on subject of %r: skipped", event.definition.id, item_id)
            return None
        body = event.definition.model_dump_json()
        return CatalogChange("flow", item_id, body, None, event.applied_by, seq, at)
    if isinstance(event, FlowDeleted):
        return CatalogChange("flow", item_id, None, None, event.deleted_by, seq, at)
    return None


async def _change(  # noqa: PLR0917 - one private call site per event kind
    conn: Conn,
    q: str,
    table: str,
    history: str,
    key: str,
    item_id: str,
    body: str | None,
    version: str | None,
    by: str | None,
    seq: int,
    at: datetime | None,
) -> None:
    """Add a revision (body None = delete) unless it changes nothing."""
    skill = table == "skills"
    row = await conn.fetchrow(
        f"SELECT revision, deleted, definition FROM {q}.{table} WHERE {key} = $1 FOR UPDATE",
        item_id,
    )
    deleted = body is None
    if row is not None:
        same_body = (
            body is not None
            and row["definition"] is not None
            and (json.loads(row["definition"]) == json.loads(body))
        )
        if (deleted and row["deleted"]) or (not deleted and not row["deleted"] and same_body):
            return  # nothing changes: no new revision
    elif deleted:
        return  # deleting something never applied: nothing to record
    revision = (row["revision"] if row else 0) + 1
    await conn.execute(
        f"INSERT INTO {q}.{history} ({key}, revision, deleted, definition, changed_by,"
        f" stream_seq, changed_at{', version' if skill else ''})"
        f" VALUES ($1, $2, $3, $4::jsonb, $5, $6, $7{', $8' if skill else ''})",
        *(item_id, revision, deleted, body, by, seq, at, *((version,) if skill else ())),
    )
    extra_cols = ", version, reset_revision" if skill else ""
    extra_vals = ", $7, $8" if skill else ""
    extra_set = (
        ", version = EXCLUDED.version, reset_revision = CASE WHEN EXCLUDED.deleted"
        f" THEN EXCLUDED.revision ELSE {table}.reset_revision END"
        if skill
        else ""
    )
    await conn.execute(
        f"INSERT INTO {q}.{table} ({key}, revision, deleted, definition, updated_seq,"
        f" updated_at{extra_cols}) VALUES ($1, $2, $3, $4::jsonb, $5, $6{extra_vals})"
        f" ON CONFLICT ({key}) DO UPDATE SET revision = EXCLUDED.revision,"
        " deleted = EXCLUDED.deleted, definition = EXCLUDED.definition,"
        f" updated_seq = EXCLUDED.updated_seq, updated_at = EXCLUDED.updated_at{extra_set}",
        *(
            item_id,
            revision,
            deleted,
            body,
            seq,
            at,
            *((version, revision if deleted else 0) if skill else ()),
        ),
    )


class PgCatalogStore:
    """`CatalogStore` over the PostgreSQL tables written by `CatalogProjection`."""

    def __init__(self, pool: asyncpg.Pool[Any], schema: str = CATALOG_SCHEMA) -> None:
        self.pool = pool
        self.q = quote_ident(schema)

    async def get_agent(self, agent_id: str, revision: int | None = None) -> StoredAgent | None:
        if revision is None:
            row = await self.pool.fetchrow(
                f"SELECT definition, revision, updated_at FROM {self.q}.agents"
                " WHERE id = $1 AND NOT deleted",
                agent_id,
            )
        else:
            row = await self.pool.fetchrow(
                f"SELECT definition, revision, changed_at AS updated_at"
                # bigint: as in get_flow, a revision past int4 is not found, never an overflow.
                f" FROM {self.q}.agent_revisions WHERE id = $1 AND revision = $2::bigint"
                " AND NOT deleted",
                agent_id,
                revision,
            )
        return None if row is None else _agent(row)

    async def list_agents(self) -> list[StoredAgent]:
        rows = await self.pool.fetch(
            f"SELECT definition, revision, updated_at FROM {self.q}.agents"
            " WHERE NOT deleted ORDER BY id"
        )
        return [_agent(r) for r in rows]

    async def get_skill(self, name: str, version: str | None = None) -> StoredSkill | None:
        if version is None:
            row = await self.pool.fetchrow(
                f"SELECT definition, revision, updated_at FROM {self.q}.skills"
                " WHERE name = $1 AND NOT deleted",
                name,
            )
        else:
            # The latest revision of that version since the skill was last deleted.
            row = await self.pool.fetchrow(
                f"SELECT h.definition, h.revision, h.changed_at AS updated_at"
                f" FROM {self.q}.skill_revisions h JOIN {self.q}.skills s ON s.name = h.name"
                " WHERE h.name = $1 AND h.version = $2 AND NOT h.deleted AND NOT s.deleted"
                " AND h.revision > s.reset_revision ORDER BY h.revision DESC LIMIT 1",
                name,
                version,
            )
        return None if row is None else _skill(row)

    async def list_skills(self) -> list[StoredSkill]:
        rows = await self.pool.fetch(
            f"SELECT definition, revision, updated_at FROM {self.q}.skills"
            " WHERE NOT deleted ORDER BY name"
        )
        return [_skill(r) for r in rows]

    async def _history(
        self, table: str, key: str, value: str, model: type[D]
    ) -> list[tuple[int, bool, D | None]]:
        rows = await self.pool.fetch(
            f"SELECT revision, deleted, definition FROM {self.q}.{table}"
            f" WHERE {key} = $1 ORDER BY revision",
            value,
        )
        return [
            (
                r["revision"],
                r["deleted"],
                None if r["definition"] is None else model.model_validate_json(r["definition"]),
            )
            for r in rows
        ]

    async def agent_history(self, agent_id: str) -> list[tuple[int, bool, AgentDefinition | None]]:
        """Every revision of an agent, oldest first: (revision, deleted, definition)."""
        return await self._history("agent_revisions", "id", agent_id, AgentDefinition)

    async def skill_history(self, name: str) -> list[tuple[int, bool, SkillDefinition | None]]:
        """Every revision of a skill, oldest first: (revision, deleted, definition)."""
        return await self._history("skill_revisions", "name", name, SkillDefinition)

    async def get_flow(self, flow_id: str, revision: int | None = None) -> StoredFlow | None:
        if revision is None:
            row = await self.pool.fetchrow(
                f"SELECT definition, revision, updated_at FROM {self.q}.flows"
                " WHERE id = $1 AND NOT deleted",
                flow_id,
            )
        else:
            row = await self.pool.fetchrow(
                f"SELECT definition, revision, changed_at AS updated_at"
                # bigint: the query allows any revision up to BIGINT_MAX; past int4 is just
                # not found, never an overflow.
                f" FROM {self.q}.flow_revisions WHERE id = $1 AND revision = $2::bigint"
                " AND NOT deleted",
                flow_id,
                revision,
            )
        return None if row is None else _flow(row)

    async def list_flows(self) -> list[StoredFlow]:
        rows = await self.pool.fetch(
            f"SELECT definition, revision, updated_at FROM {self.q}.flows"
            " WHERE NOT deleted ORDER BY id"
        )
        return [_flow(r) for r in rows]

    async def flow_history(self, flow_id: str) -> list[tuple[int, bool, FlowDefinition | None]]:
        """Every revision of a flow, oldest first: (revision, deleted, definition)."""
        return await self._history("flow_revisions", "id", flow_id, FlowDefinition)


def _agent(row: asyncpg.Record) -> StoredAgent:
    return StoredAgent(
        AgentDefinition.model_validate_json(row["definition"]), row["revision"], row["updated_at"]
    )


def _skill(row: asyncpg.Record) -> StoredSkill:
    return StoredSkill(
        SkillDefinition.model_validate_json(row["definition"]), row["revision"], row["updated_at"]
    )


def _flow(row: asyncpg.Record) -> StoredFlow:
    return StoredFlow(
        FlowDefinition.model_validate_json(row["definition"]), row["revision"], row["updated_at"]
    )
