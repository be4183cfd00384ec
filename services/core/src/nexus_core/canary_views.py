"""An agent's canary as agents.get/list show it (AgentView.canary): each arm's standing while
it runs, else the last decision with the numbers behind it."""

from __future__ import annotations

from typing import Any

import asyncpg
from nexus_events.contract import subjects
from nexus_events.contract.streams import CATALOG
from nexus_events.contract.subjects import CatalogKind
from nexus_events.events.lab import ArmStats
from nexus_events.transport.bus import Bus

from nexus_core.canary_runner import canary_arms, last_decision
from nexus_core.catalog_store import StoredAgent


def _arm(stats: ArmStats) -> dict[str, Any]:
    return stats.model_dump(mode="json")


async def decided_agents(bus: Bus) -> set[str]:
    """The agents with a canary decision in NEXUS_CATALOG (stream info: metadata only)."""
    wildcard = subjects.catalog_event(CatalogKind.AGENT, "x", "canary_decided").split(".")
    wildcard[-2] = "*"  # the agent id's token
    info = await bus.js.stream_info(CATALOG, subjects_filter=".".join(wildcard))
    return {s.split(".")[-2] for s in (info.state.subjects or {})}


async def canary_view(
    bus: Bus, pool: asyncpg.Pool[Any], runs_schema: str, agent: StoredAgent, decided: bool
) -> dict[str, Any] | None:
    """The CanaryView of `agent`, or None (no canary now, none decided). `decided`: whether
    NEXUS_CATALOG holds a decision for it (`decided_agents`)."""
    spec = agent.definition.canary
    last = await last_decision(bus, agent.definition.id) if decided else None
    if spec is not None:
        candidate, current = await canary_arms(pool, runs_schema, agent, spec)
        this = last is not None and last.current_revision == agent.revision
        return {
            "candidate": _arm(candidate),
            "current": _arm(current),
            "share": spec.share,
            "decision": last.decision if this and last else None,
            "rule": last.rule if this and last else None,
        }
    if last is None:
        return None
    return {
        "candidate": _arm(last.candidate),
        "current": _arm(last.current),
        "share": 0.0,  # decided: the canary routes no run any more
        "decision": last.decision,
        "rule": last.rule,
    }
