"""Applying and deleting catalog items: validate first, then publish the catalog event.

Nothing is published for an invalid document (`DocumentInvalid` lists every bad field). Each
call is one operator action with its own event id (a content id would swallow "apply A, apply
B, apply A again" inside the duplicate window); the bus retries a publish with the same id, and
the store adds no revision for an unchanged body, so re-applying is harmless.
"""

from __future__ import annotations

import uuid

from nats.js.api import PubAck

from nexus_events import subjects
from nexus_events.bus import Bus
from nexus_events.documents import parse_agent, parse_flow, parse_skill
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
from nexus_events.subjects import CatalogKind


async def apply_agent(
    bus: Bus, document: str | AgentDefinition, *, applied_by: str | None = None
) -> AgentDefinition:
    """Validate an agent document (YAML/JSON text or a definition) and publish `AgentApplied`."""
    definition = parse_agent(document) if isinstance(document, str) else document
    await bus.publish(
        subjects.catalog_event(CatalogKind.AGENT, definition.id, "applied"),
        AgentApplied(definition=definition, applied_by=applied_by),
        msg_id=_action_id(),
    )
    return definition


async def apply_skill(
    bus: Bus,
    document: str | SkillDefinition,
    *,
    name: str | None = None,
    applied_by: str | None = None,
) -> SkillDefinition:
    """Validate a skill (markdown with front matter, or a definition) and publish `SkillApplied`."""
    skill = parse_skill(document, name=name) if isinstance(document, str) else document
    await bus.publish(
        subjects.catalog_event(CatalogKind.SKILL, skill.name, "applied"),
        SkillApplied(skill=skill, applied_by=applied_by),
        msg_id=_action_id(),
    )
    return skill


async def delete_agent(bus: Bus, agent_id: str, *, deleted_by: str | None = None) -> PubAck:
    """Publish `AgentDeleted`; the store keeps every earlier revision."""
    return await bus.publish(
        subjects.catalog_event(CatalogKind.AGENT, agent_id, "deleted"),
        AgentDeleted(deleted_by=deleted_by),
        msg_id=_action_id(),
    )


async def delete_skill(bus: Bus, name: str, *, deleted_by: str | None = None) -> PubAck:
    """Publish `SkillDeleted`; the store keeps every earlier revision."""
    return await bus.publish(
        subjects.catalog_event(CatalogKind.SKILL, name, "deleted"),
        SkillDeleted(deleted_by=deleted_by),
        msg_id=_action_id(),
    )


async def apply_flow(
    bus: Bus, document: str | FlowDefinition, *, applied_by: str | None = None
) -> FlowDefinition:
    """Validate a flow document (YAML/JSON text or a definition) and publish `FlowApplied`.

    Only the document itself is checked here; that its agents exist is the caller's check
    (`nexus flows apply` asks core), since the catalog may legitimately change in between."""
    definition = parse_flow(document) if isinstance(document, str) else document
    await bus.publish(
        subjects.catalog_event(CatalogKind.FLOW, definition.id, "applied"),
        FlowApplied(definition=definition, applied_by=applied_by),
        msg_id=_action_id(),
    )
    return definition


async def delete_flow(bus: Bus, flow_id: str, *, deleted_by: str | None = None) -> PubAck:
    """Publish `FlowDeleted`; the store keeps every earlier revision (runs pinned to one)."""
    return await bus.publish(
        subjects.catalog_event(CatalogKind.FLOW, flow_id, "deleted"),
        FlowDeleted(deleted_by=deleted_by),
        msg_id=_action_id(),
    )


def _action_id() -> str:
    return f"catalog:{uuid.uuid4().hex}"
