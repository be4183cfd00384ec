"""Runs agents' canaries on the leader: folds each arm's finished runs from agent_runs, asks
`canary.decide`, and publishes the decision and the agent's next revision (docs/lab.md).

Woken when the agent_runs projection folds a canary run's terminal event, and every
`interval` seconds besides (the wake-up comes before the projection's commit, and a new
leader has missed the wake-ups of the old one). Publishing is idempotent: the decision and
the next `agent.applied` carry ids derived from (agent, revision), so a repeat (a second
look before the catalog has applied the new revision, a new leader) is a duplicate.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass, field
from typing import Any

import asyncpg
import nats.errors
import nats.js.errors
from nexus_events.contract import subjects
from nexus_events.contract.runstate import TERMINAL, RunStatus
from nexus_events.contract.streams import CATALOG
from nexus_events.contract.subjects import CatalogKind
from nexus_events.events import AgentApplied, AgentDefinition
from nexus_events.events.lab import ArmStats, CanaryDecided
from nexus_events.events.lab_specs import CanarySpec
from nexus_events.transport.bus import Bus
from nexus_events.transport.projection import quote_ident

from nexus_core.canary import arm_stats, decide
from nexus_core.catalog_store import CatalogStore, StoredAgent
from nexus_core.run_metrics import RunMetrics
from nexus_core.runs_projection import RUNS_SCHEMA

log = logging.getLogger(__name__)

APPLIED_BY = "core:canary"
CANARY_INTERVAL_SECONDS = 2.0
_TERMINAL_STATUSES = sorted(s.value for s in TERMINAL)


def decided_id(agent_id: str, revision: int) -> str:
    return f"core:canary:{agent_id}:{revision}:decided"


def next_revision_id(agent_id: str, revision: int) -> str:
    return f"core:canary:{agent_id}:{revision}:applied"


def decided_subject(agent_id: str) -> str:
    return subjects.catalog_event(CatalogKind.AGENT, agent_id, "canary_decided")


async def canary_arms(
    pool: asyncpg.Pool[Any], runs_schema: str, agent: StoredAgent, spec: CanarySpec
) -> tuple[ArmStats, ArmStats]:
    """(candidate, current): the finished runs of each arm of the canary `agent`'s revision
    names (runs assembled under another revision's canary do not count)."""
    table = f"{quote_ident(runs_schema)}.agent_runs"
    rows = await pool.fetch(
        "SELECT doc->'canary'->>'arm' AS arm, count(*) AS runs,"  # noqa: S608 - quoted ident
        " count(*) FILTER (WHERE status = $3) AS ok_runs,"
        " COALESCE(sum(cost_usd), 0) AS cost, COALESCE(sum(turns), 0) AS turns"
        " FROM " + table + " WHERE agent_id = $1"
        " AND (doc->'canary'->>'current_revision')::int = $2"
        " AND status = ANY($4::text[]) GROUP BY 1",
        agent.definition.id,
        agent.revision,
        RunStatus.COMPLETED.value,
        _TERMINAL_STATUSES,
    )
    by_arm = {r["arm"]: r for r in rows}

    def stats(arm: str, revision: int) -> ArmStats:
        r = by_arm.get(arm)
        if r is None:
            return arm_stats(revision, 0, 0, 0.0, 0)
        return arm_stats(revision, r["runs"], r["ok_runs"], float(r["cost"]), int(r["turns"]))

    return stats("candidate", spec.revision), stats("current", agent.revision)


async def last_decision(bus: Bus, agent_id: str) -> CanaryDecided | None:
    """The agent's latest canary decision in NEXUS_CATALOG (None: never decided)."""
    try:
        msg = await bus.js.get_last_msg(CATALOG, decided_subject(agent_id))
    except (nats.js.errors.NotFoundError, nats.errors.TimeoutError):
        return None
    try:
        return CanaryDecided.model_validate_json(msg.data or b"")
    except ValueError:
        log.warning("agent %s: unreadable canary decision at seq %s", agent_id, msg.seq)
        return None


@dataclass
class CanaryRunner:
    """The leader's canary decider (`start`/`stop` follow the lease)."""

    bus: Bus
    pool: asyncpg.Pool[Any]
    catalog: CatalogStore
    metrics: RunMetrics | None = None
    runs_schema: str = RUNS_SCHEMA
    interval: float = CANARY_INTERVAL_SECONDS
    # (agent, revision) decided by this process: not published again.
    decided: set[tuple[str, int]] = field(default_factory=set)
    _wake: asyncio.Event = field(default_factory=asyncio.Event)
    _task: asyncio.Task[None] | None = None

    def wake(self) -> None:
        """A canary run ended: look again soon."""
        self._wake.set()

    async def start(self) -> None:
        self._task = asyncio.create_task(self._loop(), name="core canary")

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _loop(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self.interval)
            self._wake.clear()
            try:
                await self.check_all()
            except Exception:  # a bad look is logged; the next one tries again
                log.exception("canary check failed")

    async def check_all(self) -> list[CanaryDecided]:
        """Judge every agent whose current revision names a canary; the decisions made."""
        made = []
        for agent in await self.catalog.list_agents():
            decided = await self.check(agent)
            if decided is not None:
                made.append(decided)
        return made

    async def check(self, agent: StoredAgent) -> CanaryDecided | None:
        spec = agent.definition.canary
        agent_id = agent.definition.id
        if spec is None or (agent_id, agent.revision) in self.decided:
            return None
        candidate, current = await canary_arms(self.pool, self.runs_schema, agent, spec)
        decision = decide(candidate, current, spec)
        if decision is None:
            return None
        if decision.decision == "promote":
            found = await self.catalog.get_agent(agent_id, spec.revision)
            if found is None:
                log.warning("agent %s: canary revision %d is gone", agent_id, spec.revision)
                return None
            following: AgentDefinition = found.definition
        else:
            following = agent.definition
        event = CanaryDecided(
            decision=decision.decision,
            candidate_revision=spec.revision,
            current_revision=agent.revision,
            rule=decision.rule,
            candidate=candidate,
            current=current,
        )
        ack = await self.bus.publish(
            decided_subject(agent_id), event, msg_id=decided_id(agent_id, agent.revision)
        )
        await self.bus.publish(
            subjects.catalog_event(CatalogKind.AGENT, agent_id, "applied"),
            AgentApplied(
                definition=following.model_copy(update={"canary": None}), applied_by=APPLIED_BY
            ),
            msg_id=next_revision_id(agent_id, agent.revision),
        )
        self.decided.add((agent_id, agent.revision))
        if not ack.duplicate:
            log.info("agent %s canary: %s (%s)", agent_id, decision.decision, decision.rule)
            if self.metrics is not None:
                self.metrics.canary_decided(agent_id, decision.decision)
        return event
