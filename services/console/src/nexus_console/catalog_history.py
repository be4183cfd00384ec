"""Every revision of an agent, a skill or a flow, numbered as core's catalog store numbers
them, read from NEXUS_CATALOG as `nexus flows history` does: the stream also says who applied
each one and when, which core's `nexus.core.v1.catalog.history` does not."""

from __future__ import annotations

from typing import Any

from nexus_events.contract import subjects
from nexus_events.contract.streams import CATALOG
from nexus_events.contract.subjects import CatalogKind
from nexus_events.events import (
    AgentApplied,
    AgentDeleted,
    FlowApplied,
    FlowDeleted,
    SkillApplied,
    SkillDeleted,
)
from nexus_events.transport.bus import Bus
from pydantic import BaseModel

# The field of an applied event that holds the definition, per kind.
BODY_FIELD = {
    CatalogKind.AGENT: "definition",
    CatalogKind.SKILL: "skill",
    CatalogKind.FLOW: "definition",
}
# The events that make a revision; an item's stream also holds others (an agent's
# `canary_decided`), which change no definition.
REVISION_EVENTS = (AgentApplied, AgentDeleted, SkillApplied, SkillDeleted, FlowApplied, FlowDeleted)


class Revision(BaseModel):
    """One revision: `definition` None when it deleted the item."""

    revision: int
    deleted: bool
    definition: dict[str, Any] | None
    by: str | None = None
    time: str | None = None

    @property
    def steps(self) -> int:
        """A flow's step count (0 for a delete, or an item that has no steps)."""
        return len((self.definition or {}).get("steps") or [])


async def catalog_history(bus: Bus, kind: CatalogKind, item_id: str) -> list[Revision]:
    """Oldest first. Core's rule: an apply that changes the definition and a delete of a live
    item each add a revision; an identical re-apply or a repeated delete adds none."""
    revisions: list[Revision] = []
    async for d in bus.replay(CATALOG, filter_subject=subjects.catalog_events_filter(kind)):
        if d.address.ids.get("id") != item_id or not isinstance(d.event, REVISION_EVENTS):
            continue
        body = d.event.model_dump(mode="json")
        definition = body.get(BODY_FIELD[kind])
        last = revisions[-1] if revisions else None
        if definition is None:  # a delete
            if last is None or last.deleted:
                continue
        elif last is not None and not last.deleted and last.definition == definition:
            continue
        revisions.append(
            Revision(
                revision=len(revisions) + 1,
                deleted=definition is None,
                definition=definition,
                by=body.get("applied_by") or body.get("deleted_by"),
                time=d.envelope.timestamp.isoformat() if d.envelope.timestamp else None,
            )
        )
    return revisions
