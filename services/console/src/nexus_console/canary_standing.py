"""An agent's canary for its catalog page: the standing core's AgentView gives (each arm's
outcomes, the decision and its rule) and every `canary_decided` event of the agent, read from
NEXUS_CATALOG with when it was decided."""

from __future__ import annotations

from typing import Any

from nexus_events.contract import subjects
from nexus_events.contract.streams import CATALOG
from nexus_events.contract.subjects import CatalogKind
from nexus_events.events import CanaryDecided
from nexus_events.events.queries import CanaryView
from nexus_events.transport.bus import Bus
from pydantic import BaseModel, ValidationError

from nexus_console.reads import QueryError

# The subject's event token: the model's name without its kind (``agent.canary_decided``).
DECIDED_TOKEN = CanaryDecided.event_name.partition(".")[2]


class CanaryDecision(BaseModel):
    """One decision as the page lists it."""

    decided: CanaryDecided
    time: str | None = None


def canary_view(agent: dict[str, Any], subject: str) -> CanaryView | None:
    """The `canary` of core's AgentView reply; one that is not a CanaryView is core's fault
    (502 naming the field), not a page crash."""
    raw = agent.get("canary")
    if raw is None:
        return None
    try:
        return CanaryView.model_validate(raw)
    except ValidationError as exc:
        first = exc.errors(include_url=False, include_input=False)[0]
        where = ".".join(str(p) for p in first["loc"]) or "(canary)"
        raise QueryError(502, f"{subject} answered a bad canary: {where}: {first['msg']}") from None


async def canary_decisions(bus: Bus, agent_id: str) -> list[CanaryDecision]:
    """Oldest first."""
    found: list[CanaryDecision] = []
    filter_subject = subjects.catalog_event(CatalogKind.AGENT, agent_id, DECIDED_TOKEN)
    async for d in bus.replay(CATALOG, filter_subject=filter_subject):
        if isinstance(d.event, CanaryDecided):
            when = d.envelope.timestamp.isoformat() if d.envelope.timestamp else None
            found.append(CanaryDecision(decided=d.event, time=when))
    return found
