"""The lab's questions to core over NATS request/reply: a run's view and events, whether an
agent revision exists. Core away or slow is `CoreUnavailableError` (the caller tries again later);
an answer that says "no such thing" is None."""

from __future__ import annotations

from typing import Any

import nats.errors
from nexus_events.contract import subjects
from nexus_events.contract.runstate import RunEvent
from nexus_events.events.evals import AgentRevision
from nexus_events.events.queries import (
    MAX_PAGE,
    AgentGet,
    Query,
    RunsEvents,
    RunsEventsReply,
    RunsGet,
    RunView,
)
from nexus_events.transport.micro import read_reply


class CoreUnavailableError(Exception):
    """Core did not answer, or answered with an error other than 404."""


class CoreClient:
    def __init__(self, nc: Any, timeout: float) -> None:
        self.nc = nc
        self.timeout = timeout

    async def _ask(self, subject: str, query: Query) -> Any | None:
        try:
            msg = await self.nc.request(
                subject, query.model_dump_json().encode(), timeout=self.timeout
            )
        except (nats.errors.TimeoutError, nats.errors.NoRespondersError) as exc:
            why = f"core did not answer {subject}: {type(exc).__name__}"
            raise CoreUnavailableError(why) from None
        reply = read_reply(msg)
        if reply.error_code == "404":
            return None
        if reply.error_code is not None:
            raise CoreUnavailableError(f"{subject}: {reply.error_code} {reply.message}")
        return reply.data

    async def run(self, run_id: str) -> RunView | None:
        data = await self._ask(subjects.CORE_RUNS_GET, RunsGet(run_id=run_id))
        return None if data is None else RunView.model_validate(data)

    async def events(self, run_id: str, from_seq: int = 1) -> RunsEventsReply | None:
        query = RunsEvents(run_id=run_id, from_seq=from_seq)
        data = await self._ask(subjects.CORE_RUNS_EVENTS, query)
        return None if data is None else RunsEventsReply.model_validate(data)

    async def tools_called(self, run_id: str) -> list[str]:
        """The names of the tools the run called, in order (its `tool_called` events), read
        page by page: a long run has more events than one reply holds."""
        names: list[str] = []
        from_seq = 1
        while True:
            reply = await self.events(run_id, from_seq)
            if reply is None or not reply.events:
                return names
            names += [
                str(e.body.get("tool", "")) for e in reply.events if e.event == RunEvent.TOOL_CALLED
            ]
            last = reply.events[-1].seq
            if len(reply.events) < MAX_PAGE or last is None:
                return names
            from_seq = last + 1

    async def agent_exists(self, revision: AgentRevision) -> bool:
        query = AgentGet(id=revision.agent_id, revision=revision.revision)
        return await self._ask(subjects.CORE_CATALOG_AGENTS_GET, query) is not None


__all__ = ["CoreClient", "CoreUnavailableError"]
