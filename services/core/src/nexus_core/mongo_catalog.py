"""The catalog in MongoDB (motor): the same revisions, history and pins as the PostgreSQL store.

Selected when the catalog URL starts with ``mongodb://``. MongoDB has no transaction shared
with the NATS checkpoint, so each event is applied idempotently, keyed by its stream sequence:

- a revision document is upserted on (item, revision), computed from the item's current state,
  so writing it twice writes the same thing;
- the item document then moves to that revision and records ``applied_seq`` (the event's
  stream sequence) in the same single-document write, which is the commit point of the event:
  an event whose sequence is not above the item's ``applied_seq`` is skipped;
- the per-stream checkpoint (``$max`` of the last sequence) is only where a restart resumes;
  events between it and the true position are skipped by ``applied_seq``, so a crash at any
  point neither loses an event nor adds a revision twice.

Definitions are kept as their canonical JSON text (as PostgreSQL keeps JSONB): skill front
matter may carry keys with ``.`` or ``$`` that MongoDB field names handle badly.
"""

from __future__ import annotations

import contextlib
import json
import logging
from typing import Any

from motor.motor_asyncio import AsyncIOMotorClient, AsyncIOMotorCollection, AsyncIOMotorDatabase
from nexus_events.contract.codec import Decoded
from nexus_events.contract.streams import CATALOG
from nexus_events.events import AgentDefinition, FlowDefinition, SkillDefinition
from nexus_events.transport.bus import Bus
from nexus_events.transport.follow import Batch, Feed, StreamFollower
from pymongo import ASCENDING, DESCENDING
from pymongo.errors import ConnectionFailure, DuplicateKeyError

from nexus_core.canary import canary_refusal
from nexus_core.catalog_store import (
    CatalogChange,
    StoredAgent,
    StoredFlow,
    StoredSkill,
    catalog_change,
)
from nexus_core.tracing import CATALOG_ITEM, event_span

log = logging.getLogger(__name__)

Document = dict[str, Any]
# Used when the URL names no database (mongodb://host:27017/).
DEFAULT_DATABASE = "nexus"
# Attempts at one event that fails for a reason other than MongoDB being away, before it is
# dead-lettered and the projection goes on (as the PostgreSQL runner does).
MAX_ATTEMPTS = 3


def is_mongodb_url(url: str | None) -> bool:
    return url is not None and url.startswith(("mongodb://", "mongodb+srv://"))


def connect(url: str) -> AsyncIOMotorClient[Document]:
    """A motor client for `url`; datetimes come back timezone-aware, like PostgreSQL's."""
    return AsyncIOMotorClient(url, tz_aware=True)


def default_database(client: AsyncIOMotorClient[Document]) -> AsyncIOMotorDatabase[Document]:
    return client.get_default_database(DEFAULT_DATABASE)


class MongoCatalogStore:
    """`CatalogStore` over MongoDB, and the writes of the catalog projection.

    Collections (prefixed by `prefix`): ``agents``, ``skills`` and ``flows`` (current state, one
    document per item), ``agent_revisions``, ``skill_revisions`` and ``flow_revisions`` (every
    revision, kept on delete) and ``checkpoint`` (per stream).
    """

    def __init__(self, db: AsyncIOMotorDatabase[Document], prefix: str = "catalog_") -> None:
        self.db = db
        self.agents: AsyncIOMotorCollection[Document] = db[f"{prefix}agents"]
        self.agent_revisions: AsyncIOMotorCollection[Document] = db[f"{prefix}agent_revisions"]
        self.skills: AsyncIOMotorCollection[Document] = db[f"{prefix}skills"]
        self.skill_revisions: AsyncIOMotorCollection[Document] = db[f"{prefix}skill_revisions"]
        self.flows: AsyncIOMotorCollection[Document] = db[f"{prefix}flows"]
        self.flow_revisions: AsyncIOMotorCollection[Document] = db[f"{prefix}flow_revisions"]
        self.checkpoints: AsyncIOMotorCollection[Document] = db[f"{prefix}checkpoint"]

    async def create(self) -> None:
        """Create the indexes (idempotent)."""
        await self.agent_revisions.create_index(
            [("id", ASCENDING), ("revision", ASCENDING)], unique=True
        )
        await self.skill_revisions.create_index(
            [("name", ASCENDING), ("revision", ASCENDING)], unique=True
        )
        await self.flow_revisions.create_index(
            [("id", ASCENDING), ("revision", ASCENDING)], unique=True
        )
        await self.skill_revisions.create_index(
            [("name", ASCENDING), ("version", ASCENDING), ("revision", DESCENDING)]
        )

    # -- write side ------------------------------------------------------------------------

    async def checkpoint(self, stream: str) -> int:
        doc = await self.checkpoints.find_one({"_id": stream})
        return int(doc["last_seq"]) if doc else 0

    async def save_checkpoint(self, stream: str, seq: int) -> None:
        await self.checkpoints.update_one({"_id": stream}, {"$max": {"last_seq": seq}}, upsert=True)

    async def apply(self, change: CatalogChange) -> bool:
        """Apply one change; True if it added a revision. Safe to call again for the same seq."""
        current, history, key = {
            "agent": (self.agents, self.agent_revisions, "id"),
            "skill": (self.skills, self.skill_revisions, "name"),
            "flow": (self.flows, self.flow_revisions, "id"),
        }[change.kind]
        doc = await current.find_one({"_id": change.item_id})
        if doc is not None and doc["applied_seq"] >= change.seq:
            return False  # applied before a restart
        if change.canary_revision is not None:
            candidate = await self.agent_revisions.find_one(
                {"id": change.item_id, "revision": change.canary_revision}
            )
            live = candidate is not None and not candidate["deleted"]
            latest = doc["revision"] if doc else 0
            refusal = canary_refusal(
                change.item_id, change.seq, change.canary_revision, latest, live
            )
            if refusal is not None:
                log.warning("%s", refusal)
                return False
        deleted = change.body is None
        if doc is not None:
            same_body = (
                change.body is not None
                and doc["definition"] is not None
                and json.loads(doc["definition"]) == json.loads(change.body)
            )
            if (deleted and doc["deleted"]) or (not deleted and not doc["deleted"] and same_body):
                return False  # nothing changes: no new revision
        elif deleted:
            return False  # deleting something never applied: nothing to record
        revision = (doc["revision"] if doc else 0) + 1
        entry: Document = {
            key: change.item_id,
            "revision": revision,
            "deleted": deleted,
            "definition": change.body,
            "changed_by": change.by,
            "stream_seq": change.seq,
            "changed_at": change.at,
        }
        state: Document = {
            "revision": revision,
            "deleted": deleted,
            "definition": change.body,
            "applied_seq": change.seq,
            "updated_at": change.at,
        }
        if change.kind == "skill":
            entry["version"] = change.version
            state["version"] = change.version
            reset = doc.get("reset_revision", 0) if doc else 0
            state["reset_revision"] = revision if deleted else reset
        await history.update_one(
            {key: change.item_id, "revision": revision}, {"$set": entry}, upsert=True
        )
        if doc is None:
            with contextlib.suppress(DuplicateKeyError):  # another writer got there first
                await current.insert_one({"_id": change.item_id, **state})
        else:
            # Only from the state this revision was computed from (another writer: no-op).
            await current.update_one(
                {"_id": change.item_id, "applied_seq": doc["applied_seq"]}, {"$set": state}
            )
        return True

    # -- read side -------------------------------------------------------------------------

    async def get_agent(self, agent_id: str, revision: int | None = None) -> StoredAgent | None:
        if revision is None:
            doc = await self.agents.find_one({"_id": agent_id, "deleted": False})
            return None if doc is None else _agent(doc)
        doc = await self.agent_revisions.find_one(
            {"id": agent_id, "revision": revision, "deleted": False}
        )
        return None if doc is None else _agent(doc, doc.get("changed_at"))

    async def list_agents(self) -> list[StoredAgent]:
        cursor = self.agents.find({"deleted": False}).sort("_id", ASCENDING)
        return [_agent(d) async for d in cursor]

    async def get_skill(self, name: str, version: str | None = None) -> StoredSkill | None:
        current = await self.skills.find_one({"_id": name, "deleted": False})
        if current is None:
            return None
        if version is None:
            return _skill(current)
        # The latest revision of that version since the skill was last deleted.
        cursor = (
            self.skill_revisions.find(
                {
                    "name": name,
                    "version": version,
                    "deleted": False,
                    "revision": {"$gt": current.get("reset_revision", 0)},
                }
            )
            .sort("revision", DESCENDING)
            .limit(1)
        )
        async for doc in cursor:
            return StoredSkill(
                SkillDefinition.model_validate_json(doc["definition"]),
                doc["revision"],
                doc["changed_at"],
            )
        return None

    async def list_skills(self) -> list[StoredSkill]:
        cursor = self.skills.find({"deleted": False}).sort("_id", ASCENDING)
        return [_skill(d) async for d in cursor]

    async def agent_history(self, agent_id: str) -> list[tuple[int, bool, AgentDefinition | None]]:
        """Every revision of an agent, oldest first: (revision, deleted, definition)."""
        cursor = self.agent_revisions.find({"id": agent_id}).sort("revision", ASCENDING)
        return [
            (
                d["revision"],
                d["deleted"],
                None
                if d["definition"] is None
                else AgentDefinition.model_validate_json(d["definition"]),
            )
            async for d in cursor
        ]

    async def skill_history(self, name: str) -> list[tuple[int, bool, SkillDefinition | None]]:
        """Every revision of a skill, oldest first: (revision, deleted, definition)."""
        cursor = self.skill_revisions.find({"name": name}).sort("revision", ASCENDING)
        return [
            (
                d["revision"],
                d["deleted"],
                None
                if d["definition"] is None
                else SkillDefinition.model_validate_json(d["definition"]),
            )
            async for d in cursor
        ]

    async def get_flow(self, flow_id: str, revision: int | None = None) -> StoredFlow | None:
        if revision is None:
            doc = await self.flows.find_one({"_id": flow_id, "deleted": False})
            return None if doc is None else _flow(doc, doc.get("updated_at"))
        doc = await self.flow_revisions.find_one(
            {"id": flow_id, "revision": revision, "deleted": False}
        )
        return None if doc is None else _flow(doc, doc.get("changed_at"))

    async def list_flows(self) -> list[StoredFlow]:
        cursor = self.flows.find({"deleted": False}).sort("_id", ASCENDING)
        return [_flow(d, d.get("updated_at")) async for d in cursor]

    async def flow_history(self, flow_id: str) -> list[tuple[int, bool, FlowDefinition | None]]:
        """Every revision of a flow, oldest first: (revision, deleted, definition)."""
        cursor = self.flow_revisions.find({"id": flow_id}).sort("revision", ASCENDING)
        return [
            (
                d["revision"],
                d["deleted"],
                None
                if d["definition"] is None
                else FlowDefinition.model_validate_json(d["definition"]),
            )
            async for d in cursor
        ]


def _flow(doc: Document, at: Any) -> StoredFlow:
    return StoredFlow(FlowDefinition.model_validate_json(doc["definition"]), doc["revision"], at)


def _agent(doc: Document, at: Any = None) -> StoredAgent:
    return StoredAgent(
        AgentDefinition.model_validate_json(doc["definition"]),
        doc["revision"],
        doc.get("updated_at") if at is None else at,
    )


def _skill(doc: Document) -> StoredSkill:
    return StoredSkill(
        SkillDefinition.model_validate_json(doc["definition"]),
        doc["revision"],
        doc.get("updated_at"),
    )


class MongoCatalogRunner(StreamFollower):
    """Feeds NEXUS_CATALOG into a `MongoCatalogStore` until stopped: the follow loop of the
    PostgreSQL projections, with MongoDB keeping the checkpoint and applying each event
    idempotently (see the module docstring)."""

    def __init__(
        self,
        bus: Bus,
        store: MongoCatalogStore,
        *,
        batch: int = 500,
        fetch_timeout: float = 1.0,
        consumer: str = "proj_catalog_mongo",
    ) -> None:
        super().__init__(
            bus,
            [Feed(CATALOG, consumer)],
            name="catalog(mongodb)",
            batch=batch,
            fetch_timeout=fetch_timeout,
            unavailable=(ConnectionFailure,),
        )
        self.store = store
        self.consumer = consumer
        self.applied = 0

    async def __aenter__(self) -> MongoCatalogRunner:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def setup(self) -> None:
        await self.store.create()

    async def checkpoint(self, feed: Feed) -> int:
        return await self.store.checkpoint(feed.stream)

    async def handle(self, feed: Feed, batch: Batch, delivered: int) -> None:
        await self.dead_letter_poison(feed, batch)
        for decoded in batch.events:
            with event_span(
                "core project catalog", decoded, {CATALOG_ITEM: decoded.address.ids.get("id", "")}
            ):
                await self._apply(feed, decoded)
        await self.store.save_checkpoint(feed.stream, batch.last_seq)

    async def _apply(self, feed: Feed, decoded: Decoded) -> None:
        change = catalog_change(decoded)
        if change is None:
            return
        for attempt in range(1, MAX_ATTEMPTS + 1):
            try:
                added = await self.store.apply(change)
            except ConnectionFailure:
                raise  # MongoDB is away: reposition and retry from the checkpoint
            except Exception as exc:
                if attempt == MAX_ATTEMPTS:
                    log.exception("catalog event %d failed, dead-lettered", change.seq)
                    await self.dead_letter_event(feed, decoded, exc, MAX_ATTEMPTS)
            else:
                self.applied += int(added)
                return
