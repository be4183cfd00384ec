"""Consolidation: a periodic, LLM-free pass that keeps memory small and current.

Per scope, over the memories recorded since the scope's last pass (so a pass costs what was
added, not what is stored), each new memory is compared with the older live ones of its scope
(nearest neighbours by the HNSW index):

- same normalised text (exact duplicate), or similarity >= `near_duplicate` and the same kind:
  the newer one is superseded by the older (which keeps its access history);
- similarity >= `contradiction` and one of the two negates what the other says (``not``,
  ``never``, ``no longer``, ``n't``...): the newer supersedes the older (``contradicted``).

Then every live memory of the scope that is older than `decay_days` and unused for as long is
marked stale. Every change is an event (`superseded`, then one `consolidated` per scope with
the stale ids and the sequence the pass covered), so it is auditable and replays to the same
tables. Event ids derive from the scope and that sequence: two replicas running the same pass
store its events once.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import asyncpg
from nexus_events.contract import subjects
from nexus_events.events import MemoryConsolidated, MemoryConsolidateReply, MemorySuperseded
from nexus_events.transport.bus import Bus
from nexus_events.transport.projection import quote_ident

from nexus_memory.projection import MEMORY_SCHEMA

log = logging.getLogger(__name__)

NEIGHBOURS = 5
_NEGATION = re.compile(
    r"\b(?:not|no|never|none|nobody|nothing|cannot|no longer|without|stop(?:ped)?|"
    r"instead of)\b|n't\b",
    re.IGNORECASE,
)


def negates(text: str) -> bool:
    return _NEGATION.search(text) is not None


@dataclass(frozen=True, slots=True)
class Decision:
    memory_id: str
    by_memory_id: str
    reason: str  # duplicate, near_duplicate, contradicted


@dataclass(frozen=True, slots=True)
class Thresholds:
    near_duplicate: float = 0.95
    contradiction: float = 0.8
    decay_days: float = 90.0


def decide(
    new: dict[str, Any], neighbours: list[dict[str, Any]], t: Thresholds, gone: set[str]
) -> Decision | None:
    """What to do with one new memory given its older live neighbours (best first)."""
    for n in neighbours:
        if n["memory_id"] in gone:
            continue
        if n["content_hash"] == new["content_hash"]:
            return Decision(new["memory_id"], n["memory_id"], "duplicate")
        if n["similarity"] >= t.near_duplicate and n["kind"] == new["kind"]:
            return Decision(new["memory_id"], n["memory_id"], "near_duplicate")
        if n["similarity"] >= t.contradiction and negates(n["text"]) != negates(new["text"]):
            return Decision(n["memory_id"], new["memory_id"], "contradicted")
    return None


class Consolidator:
    def __init__(
        self,
        bus: Bus,
        pool: asyncpg.Pool[Any],
        thresholds: Thresholds,
        *,
        schema: str = MEMORY_SCHEMA,
    ) -> None:
        self.bus = bus
        self.pool = pool
        self.t = thresholds
        self.q = quote_ident(schema)

    async def run(self, scopes: list[str], now: datetime) -> MemoryConsolidateReply:
        """One pass over `scopes` (every scope when empty)."""
        if not scopes:
            scopes = [
                r["scope"]
                for r in await self.pool.fetch(
                    f"SELECT DISTINCT scope FROM {self.q}.memories ORDER BY scope"
                )
            ]
        superseded = stale = 0
        for scope in scopes:
            s, st = await self._scope(scope, now)
            superseded += s
            stale += st
        return MemoryConsolidateReply(scopes=len(scopes), superseded=superseded, stale=stale)

    async def _scope(self, scope: str, now: datetime) -> tuple[int, int]:
        q = self.q
        async with self.pool.acquire() as conn:
            since = await conn.fetchval(
                f"SELECT COALESCE(max(through_seq), 0) FROM {q}.consolidations WHERE scope = $1",
                scope,
            )
            new = await conn.fetch(
                f"SELECT memory_id, kind, text, content_hash, embedding, seq FROM {q}.memories"
                " WHERE scope = $1 AND seq > $2 AND valid_to IS NULL AND NOT forgotten"
                " ORDER BY seq",
                scope,
                since,
            )
            decisions: list[Decision] = []
            gone: set[str] = set()
            for row in new:
                if row["memory_id"] in gone:
                    continue
                neighbours = await conn.fetch(
                    f"SELECT memory_id, kind, text, content_hash,"
                    f" 1 - (embedding <=> $1) AS similarity FROM {q}.memories"
                    " WHERE scope = $2 AND seq < $3 AND valid_to IS NULL AND NOT forgotten"
                    " ORDER BY embedding <=> $1 LIMIT $4",
                    row["embedding"],
                    scope,
                    row["seq"],
                    NEIGHBOURS,
                )
                d = decide(dict(row), [dict(n) for n in neighbours], self.t, gone)
                if d is not None:
                    decisions.append(d)
                    gone.add(d.memory_id)
            cutoff = now - timedelta(days=self.t.decay_days)
            stale = [
                r["memory_id"]
                for r in await conn.fetch(
                    f"SELECT memory_id FROM {q}.memories WHERE scope = $1 AND valid_to IS NULL"
                    " AND NOT forgotten AND NOT stale AND recorded_at < $2"
                    " AND COALESCE(last_accessed_at, recorded_at) < $2 ORDER BY seq",
                    scope,
                    cutoff,
                )
                if r["memory_id"] not in gone
            ]
            through = max([since, *(r["seq"] for r in new)])
        if not decisions and not stale and through == since:
            return 0, 0
        pass_id = f"{scope}-{through}"
        for d in decisions:
            await self.bus.publish(
                subjects.memory_event(scope, "superseded"),
                MemorySuperseded(
                    memory_id=d.memory_id, by_memory_id=d.by_memory_id, reason=d.reason
                ),
                msg_id=f"memory-consolidation-{pass_id}-{d.memory_id}",
            )
        await self.bus.publish(
            subjects.memory_event(scope, "consolidated"),
            MemoryConsolidated(
                pass_id=pass_id, stale=stale, superseded=len(decisions), through_seq=through
            ),
            msg_id=f"memory-consolidated-{pass_id}-{len(stale)}",
        )
        if decisions or stale:
            log.info("consolidated %s: %d superseded, %d stale", scope, len(decisions), len(stale))
        return len(decisions), len(stale)
