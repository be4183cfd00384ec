"""Accepting new flow runs: the definition each asks for, from core's catalog
(``nexus.core.v1.catalog.flows.get``), pinned in an `accepted` event, or `failed` when core
knows no such flow."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable, Iterable

import nats.errors
from nexus_events.contract import subjects
from nexus_events.events.flows import FlowAccepted, FlowEvent, FlowFailed, FlowReason
from nexus_events.events.queries import FlowDefinitionGet, FlowDefinitionView
from nexus_events.transport.bus import Bus
from nexus_events.transport.publish import Outgoing

from nexus_flows.messages import terminal_msg_id
from nexus_flows.records import FlowState

log = logging.getLogger(__name__)


class Acceptance:
    """Asks the catalog for the engine; remembers the flow runs whose question went
    unanswered (core away) and when to ask again (`waiting`)."""

    def __init__(self, bus: Bus, *, timeout: float, retry: float, concurrency: int) -> None:
        self.bus = bus
        self.timeout = timeout
        self.retry = retry
        self.concurrency = concurrency
        self._after: dict[str, float] = {}  # flow run -> loop time it may ask again

    def waiting(self) -> list[str]:
        """The flow runs whose catalog question is to be asked again."""
        return list(self._after)

    async def accept_all(
        self,
        states: list[FlowState],
        failed: list[BaseException],
        touch: Callable[[Iterable[str]], None],
    ) -> list[Outgoing]:
        """The `accepted` (or `failed`) of each flow run not accepted yet: one catalog request
        per distinct (flow, revision) asked for, concurrently, its answer shared by every run
        that asked the same (a burst of runs of one flow asks once). A question that fails
        adds its error to `failed` and `touch`es its flow runs again; the others go on."""
        now = asyncio.get_running_loop().time()
        asking: dict[tuple[str, int | None], list[FlowState]] = {}
        for state in states:
            if self._after.get(state.flow_run_id, 0.0) <= now:
                asking.setdefault((state.flow, state.requested_revision), []).append(state)
        out: list[Outgoing] = []
        limit = asyncio.Semaphore(self.concurrency)

        async def one(flow: str, revision: int | None, waiting: list[FlowState]) -> None:
            async with limit:
                try:
                    out.extend(await self._accept(flow, revision, waiting))
                except Exception as exc:  # noqa: BLE001 - these next pass, the others go on
                    touch(st.flow_run_id for st in waiting)
                    failed.append(exc)

        await asyncio.gather(*(one(f, r, w) for (f, r), w in asking.items()))
        return out

    async def _accept(
        self, flow: str, revision: int | None, states: list[FlowState]
    ) -> list[Outgoing]:
        loop = asyncio.get_running_loop()
        query = FlowDefinitionGet(id=flow, revision=revision)
        try:
            reply = await self.bus.nc.request(
                subjects.CORE_CATALOG_FLOWS_GET,
                query.model_dump_json().encode(),
                timeout=self.timeout,
            )
        except (nats.errors.TimeoutError, nats.errors.NoRespondersError):
            for state in states:
                self._after[state.flow_run_id] = loop.time() + self.retry
            log.warning("core's catalog did not answer for flow %s; retrying", flow)
            return []
        for state in states:
            self._after.pop(state.flow_run_id, None)
        body = json.loads(reply.data or b"{}")
        if isinstance(body, dict) and "error" in body:
            error = body["error"] or {}
            code = error.get("code")
            if code in (400, 404):
                reason = FlowReason.UNKNOWN_FLOW if code == 404 else FlowReason.INVALID_REQUEST
                failed = FlowFailed(reason=reason, message=str(error.get("message", "")))
                return [
                    Outgoing(
                        subjects.flow_event(st.flow_run_id, FlowEvent.FAILED),
                        failed,
                        msg_id=terminal_msg_id(st, FlowEvent.FAILED),
                    )
                    for st in states
                ]
            for state in states:
                self._after[state.flow_run_id] = loop.time() + self.retry
            return []
        view = FlowDefinitionView.model_validate(body)
        accepted = FlowAccepted(flow=flow, revision=view.revision, definition=view.definition)
        return [
            Outgoing(
                subjects.flow_event(st.flow_run_id, FlowEvent.ACCEPTED),
                accepted,
                msg_id=f"flow:{st.flow_run_id}:accepted",
            )
            for st in states
        ]


__all__ = ["Acceptance"]
