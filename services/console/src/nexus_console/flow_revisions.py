"""A flow definition's revisions, from the catalog stream as `nexus flows history` reads it:
the one place to switch to core's history query once it exists."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from nexus_events.contract import subjects
from nexus_events.contract.streams import CATALOG
from nexus_events.contract.subjects import CatalogKind
from nexus_events.events.flows import FlowApplied, FlowDeleted
from nexus_events.transport.bus import Bus


@dataclass(frozen=True)
class FlowRevision:
    """One apply or delete that made a catalog revision."""

    revision: int
    deleted: bool
    by: str | None
    at: datetime | None
    steps: int


async def flow_revisions(bus: Bus, flow_id: str) -> list[FlowRevision]:
    """Every revision of `flow_id`, oldest first, numbered by core's rule: an unchanged
    re-apply, or a delete of what is not there, makes none."""
    out: list[FlowRevision] = []
    revision = 0
    current: dict[str, Any] | None = None  # the live definition, None when absent
    async for d in bus.replay(
        CATALOG, filter_subject=subjects.catalog_events_filter(CatalogKind.FLOW)
    ):
        if d.address.ids.get("id") != flow_id:
            continue
        event = d.event
        at = d.envelope.timestamp
        if isinstance(event, FlowApplied):
            definition = event.definition.model_dump(mode="json")
            if definition != current:
                revision, current = revision + 1, definition
                out.append(
                    FlowRevision(revision, False, event.applied_by, at, len(event.definition.steps))
                )
        elif isinstance(event, FlowDeleted) and current is not None:
            revision, current = revision + 1, None
            out.append(FlowRevision(revision, True, event.deleted_by, at, 0))
    return out
