"""NEXUS_RUNS terminal events, read by the lab's deciding replica: a case run (or a reviewer
run of one) that ended is handed to the engine to grade; every other run is acked and
ignored."""

from __future__ import annotations

from typing import Any

import asyncpg
from nexus_events.contract import subjects
from nexus_events.contract.runstate import TERMINAL_EVENTS
from nexus_events.contract.streams import RUNS
from nexus_events.events.runs import TerminalEvent
from nexus_events.transport.bus import ConsumerSpec, Delivery
from nexus_events.transport.projection import quote_ident

from nexus_lab.decide import case_run_of_reviewer
from nexus_lab.engine import Engine
from nexus_lab.store import SCHEMA


def runs_spec(prefix: str, fetch_timeout: float) -> ConsumerSpec:
    return ConsumerSpec(
        stream=RUNS,
        durable=f"{prefix}_runs",
        filter_subjects=tuple(subjects.run_events_filter(None, e) for e in TERMINAL_EVENTS),
        fetch_timeout=fetch_timeout,
    )


class RunEndings:
    def __init__(self, pool: asyncpg.Pool[Any], engine: Engine, schema: str = SCHEMA) -> None:
        self.pool = pool
        self.engine = engine
        self.q = quote_ident(schema)

    async def on_runs(self, batch: list[Delivery]) -> None:
        for d in batch:
            run_id = d.address.ids.get("run_id")
            if not isinstance(d.event, TerminalEvent) or run_id is None:
                continue
            eval_run_id = await self._ungraded(run_id)
            case_run = run_id
            reviewer = case_run_of_reviewer(run_id) if eval_run_id is None else None
            if reviewer is not None:
                case_run = reviewer[0]
                eval_run_id = await self._ungraded(case_run)
            if eval_run_id is not None:
                self.engine.ended(case_run, eval_run_id)

    async def _ungraded(self, run_id: str) -> str | None:
        """The eval run of an ungraded case run `run_id` (None: not one)."""
        found = await self.pool.fetchval(
            f"SELECT eval_run_id FROM {self.q}.eval_cases WHERE run_id = $1 AND passed IS NULL",
            run_id,
        )
        return None if found is None else str(found)


__all__ = ["RunEndings", "runs_spec"]
