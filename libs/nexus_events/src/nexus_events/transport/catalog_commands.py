"""Applying and deleting catalog items: validate first, then publish the catalog event.

Nothing is published for an invalid document (`DocumentInvalid` lists every bad field). An
apply's event id is derived from its content (kind, id, body), so a retried apply inside the
stream's duplicate window stores one event, not two identical ones. "Apply A, apply B, apply A
again" inside the window must still land: when the stream answers "duplicate" and the item's
last event is not that same apply, it is published again under an id that also names the
item's last sequence. Outside the window the store adds no revision for an unchanged body.
A delete is one operator action with its own id (the store ignores a delete of a deleted item).
"""

from __future__ import annotations

import hashlib
import json
import uuid

import nats.js.errors
from nats.js.api import PubAck
from pydantic import BaseModel

from nexus_events.contract import subjects
from nexus_events.contract.documents import parse_agent, parse_flow, parse_skill
from nexus_events.contract.streams import CATALOG
from nexus_events.contract.subjects import CatalogKind
from nexus_events.events import (
    AgentApplied,
    AgentDefinition,
    AgentDeleted,
    EvalApplied,
    EvalDeleted,
    EvalSuite,
    FlowApplied,
    FlowDefinition,
    FlowDeleted,
    SkillApplied,
    SkillDefinition,
    SkillDeleted,
)
from nexus_events.events.budgets import BudgetApplied, BudgetDefinition, BudgetDeleted
from nexus_events.transport.bus import Bus


async def apply_agent(
    bus: Bus, document: str | AgentDefinition, *, applied_by: str | None = None
) -> AgentDefinition:
    """Validate an agent document (YAML/JSON text or a definition) and publish `AgentApplied`."""
    definition = parse_agent(document) if isinstance(document, str) else document
    event = AgentApplied(definition=definition, applied_by=applied_by)
    await _publish_apply(bus, CatalogKind.AGENT, definition.id, event, definition)
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
    event = SkillApplied(skill=skill, applied_by=applied_by)
    await _publish_apply(bus, CatalogKind.SKILL, skill.name, event, skill)
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
    event = FlowApplied(definition=definition, applied_by=applied_by)
    await _publish_apply(bus, CatalogKind.FLOW, definition.id, event, definition)
    return definition


async def delete_flow(bus: Bus, flow_id: str, *, deleted_by: str | None = None) -> PubAck:
    """Publish `FlowDeleted`; the store keeps every earlier revision (runs pinned to one)."""
    return await bus.publish(
        subjects.catalog_event(CatalogKind.FLOW, flow_id, "deleted"),
        FlowDeleted(deleted_by=deleted_by),
        msg_id=_action_id(),
    )


async def apply_eval(bus: Bus, suite: EvalSuite, *, applied_by: str | None = None) -> PubAck:
    """Publish `EvalApplied` for a validated suite (the lab numbers its revisions)."""
    event = EvalApplied(suite=suite, applied_by=applied_by)
    return await _publish_apply(bus, CatalogKind.EVAL, suite.id, event, suite)


async def delete_eval(bus: Bus, suite_id: str, *, deleted_by: str | None = None) -> PubAck:
    """Publish `EvalDeleted`; the lab keeps every earlier revision (eval runs pinned to one)."""
    return await bus.publish(
        subjects.catalog_event(CatalogKind.EVAL, suite_id, "deleted"),
        EvalDeleted(deleted_by=deleted_by),
        msg_id=_action_id(),
    )


async def apply_budget(
    bus: Bus, budget: BudgetDefinition, *, applied_by: str | None = None
) -> PubAck:
    """Publish `BudgetApplied` for a validated budget (the catalog numbers its revisions)."""
    event = BudgetApplied(budget=budget, applied_by=applied_by)
    return await _publish_apply(bus, CatalogKind.BUDGET, budget.id, event, budget)


async def delete_budget(bus: Bus, budget_id: str, *, deleted_by: str | None = None) -> PubAck:
    """Publish `BudgetDeleted`; its revisions stay in the catalog's record."""
    return await bus.publish(
        subjects.catalog_event(CatalogKind.BUDGET, budget_id, "deleted"),
        BudgetDeleted(deleted_by=deleted_by),
        msg_id=_action_id(),
    )


def _action_id() -> str:
    return f"catalog:{uuid.uuid4().hex}"


def apply_id(kind: CatalogKind, item_id: str, body: BaseModel) -> str:
    """The event id of applying `body`: equal for equal content (the stream deduplicates a
    retry), whoever applies it."""
    canonical = json.dumps(body.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))
    digest = hashlib.sha256(f"{kind.value}\n{item_id}\n{canonical}".encode()).hexdigest()
    return f"catalog-apply:{digest[:40]}"


async def _publish_apply(
    bus: Bus,
    kind: CatalogKind,
    item_id: str,
    event: AgentApplied | SkillApplied | FlowApplied | EvalApplied | BudgetApplied,
    body: BaseModel,
) -> PubAck:
    subject = subjects.catalog_event(kind, item_id, "applied")
    msg_id = apply_id(kind, item_id, body)
    ack = await bus.publish(subject, event, msg_id=msg_id)
    if not ack.duplicate:
        return ack
    # A duplicate inside the window: a retry of this apply (nothing to do), or the same
    # content applied again after another change to the item (A, B, A), which must land.
    last_seq, last_id = await _last_event(bus, kind, item_id)
    if last_id is not None and (last_id == msg_id or last_id.startswith(f"{msg_id}:")):
        return ack  # the item's last event already carries this content
    return await bus.publish(subject, event, msg_id=f"{msg_id}:{last_seq}")


async def _last_event(bus: Bus, kind: CatalogKind, item_id: str) -> tuple[int, str | None]:
    """The stream sequence and event id of the item's newest catalog event (0, None: none)."""
    newest: tuple[int, str | None] = (0, None)
    for what in ("applied", "deleted"):
        try:
            msg = await bus.js.get_last_msg(CATALOG, subjects.catalog_event(kind, item_id, what))
        except nats.js.errors.NotFoundError:
            continue
        if msg.seq is not None and msg.seq > newest[0]:
            newest = (msg.seq, (msg.headers or {}).get("Nats-Msg-Id"))
    return newest
