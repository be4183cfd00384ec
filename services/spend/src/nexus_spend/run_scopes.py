"""A run's scopes (team, agent, task, flow, flow run) for its reservations: from the
projection's ``spend.runs`` once it folded the run's `prepared`, else straight from the run's
last `requested` and `prepared` on NEXUS_RUNS (the runner reserves right after `prepared`, so
the projection may not have read it yet)."""

from __future__ import annotations

import contextlib
import logging
from collections import OrderedDict
from typing import Any

import asyncpg
import nats.errors
import nats.js.errors
from nats.js import JetStreamContext
from nexus_events.contract import subjects
from nexus_events.contract.codec import decode
from nexus_events.contract.runstate import RunEvent
from nexus_events.contract.streams import RUNS
from nexus_events.errors import NexusError
from nexus_events.events import RunPrepared, RunRequested
from nexus_events.events.base import Event
from nexus_events.transport.projection import quote_ident

from nexus_spend.coverage import RunScopes
from nexus_spend.schema import SCHEMA

log = logging.getLogger(__name__)

# Runs whose scopes are kept in memory: a run reserves once per model call, and its scopes
# never change after `prepared`.
CACHED_RUNS = 10_000


class RunScopesReader:
    """`scopes(run_id)`: the run's `RunScopes`, None when neither the projection nor the
    stream knows the run (a forged id)."""

    def __init__(
        self, pool: asyncpg.Pool[Any], js: JetStreamContext, *, schema: str = SCHEMA
    ) -> None:
        self.pool = pool
        self.js = js
        self.q = quote_ident(schema)
        self._cache: OrderedDict[str, RunScopes] = OrderedDict()

    async def scopes(self, run_id: str) -> RunScopes | None:
        cached = self._cache.get(run_id)
        if cached is not None:
            self._cache.move_to_end(run_id)
            return cached
        scopes, final = await self._from_projection(run_id)
        if not final:
            scopes, final = await self._from_stream(run_id, scopes)
        if scopes is not None and final:
            self._cache[run_id] = scopes
            if len(self._cache) > CACHED_RUNS:
                self._cache.popitem(last=False)
        return scopes

    async def _from_projection(self, run_id: str) -> tuple[RunScopes | None, bool]:
        """The projection's row; final when it holds both the request and `prepared`."""
        row = await self.pool.fetchrow(
            f"""SELECT team, agent_id, task_id, flow, flow_run_id,
                    requested_at IS NOT NULL AND model IS NOT NULL AS complete
                FROM {self.q}.runs WHERE run_id = $1""",
            run_id,
        )
        if row is None:
            return None, False
        scopes = RunScopes(
            run_id,
            agent_id=row["agent_id"],
            team=row["team"],
            task_id=row["task_id"],
            flow=row["flow"],
            flow_run_id=row["flow_run_id"],
        )
        return scopes, bool(row["complete"])

    async def _from_stream(
        self, run_id: str, partial: RunScopes | None
    ) -> tuple[RunScopes | None, bool]:
        requested = await self._last(run_id, RunEvent.REQUESTED)
        prepared = await self._last(run_id, RunEvent.PREPARED)
        req = requested if isinstance(requested, RunRequested) else None
        prep = prepared if isinstance(prepared, RunPrepared) else None
        if req is None and prep is None:
            return partial, False
        labels = req.labels if req is not None else {}
        config = prep.config if prep is not None else None
        team = (config.team if config is not None else None) or (req.team if req else None)
        agent_id = config.agent_id if config is not None else (req.agent_id if req else None)
        task_id = (config.task_id if config is not None else None) or (req.task_id if req else None)
        scopes = RunScopes(
            run_id,
            agent_id=agent_id,
            team=team,
            task_id=task_id,
            flow=labels.get("flow"),
            flow_run_id=labels.get("flow_run_id"),
        )
        return scopes, req is not None and prep is not None

    async def _last(self, run_id: str, event: RunEvent) -> Event | None:
        """The last message of one of the run's events (a direct get, no consumer)."""
        try:
            raw = await self.js.get_last_msg(RUNS, subjects.run_event(run_id, event))
        except nats.js.errors.NotFoundError:
            return None
        except nats.errors.Error as exc:
            log.warning("reading %s of run %s failed: %s", event, run_id, exc)
            raise
        with contextlib.suppress(NexusError):
            return decode(raw.subject or "", raw.data or b"", dict(raw.headers or {})).event
        return None


__all__ = ["CACHED_RUNS", "RunScopesReader"]
