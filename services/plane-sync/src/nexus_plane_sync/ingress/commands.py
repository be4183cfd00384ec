"""The Nexus commands the ingress publishes: run and flow requests on a task, and their cancels."""

from __future__ import annotations

from nexus_events.contract import subjects
from nexus_events.contract.runstate import RunEvent
from nexus_events.errors import InvalidSubject
from nexus_events.events import (
    CancelRequested,
    FlowCancelRequested,
    FlowRequested,
    Origin,
    PlaneWebhookReceived,
    Reason,
    RunRequested,
)
from nexus_events.transport.run_requests import request_flow, request_run

from nexus_plane_sync.ingress.core import SOURCE, IngressCore, Unusable, _instructions


class RunCommands(IngressCore):
    """Request and cancel runs and flow runs (ids derived from the delivery: no repeats)."""

    async def _request_run(
        self, w: PlaneWebhookReceived, item: str, task_id: str, agent: str, actor: str | None
    ) -> None:
        run_id = f"plane-{w.delivery_id}-{agent}"[:128]
        request = RunRequested(
            agent_id=agent,
            task_id=task_id,
            input=_instructions(w.data),
            origin=Origin.PLANE,
            requested_by=actor,
            labels={"plane_work_item": item},
        )
        try:
            ack = await request_run(self.bus, run_id, request, source=SOURCE)
        except InvalidSubject as exc:  # raised before anything is sent
            raise Unusable("invalid_webhook", f"delivery id unusable as run id: {exc}") from None
        self._stored(ack)
        self._count("runs_requested")

    async def _request_flow(
        self, w: PlaneWebhookReceived, item: str, task_id: str, flow: str, actor: str | None
    ) -> None:
        # Derived from the delivery like a run's id: a redelivered webhook asks for the same
        # flow run, and JetStream drops the repeat.
        flow_run_id = f"plane-{w.delivery_id}-flow-{flow}"[:128]
        request = FlowRequested(
            flow=flow,
            task_id=task_id,
            input=_instructions(w.data),
            origin=Origin.PLANE,
            requested_by=actor,
            labels={"plane_work_item": item},
        )
        try:
            ack = await request_flow(self.bus, flow_run_id, request, source=SOURCE)
        except InvalidSubject as exc:  # raised before anything is sent
            why = f"delivery id unusable as flow run id: {exc}"
            raise Unusable("invalid_webhook", why) from None
        self._stored(ack)
        self._count("flows_requested")

    async def _cancel(self, run_id: str, actor: str | None, cause: str) -> None:
        await self._publish(
            subjects.run_event(run_id, RunEvent.CANCEL_REQUESTED),
            CancelRequested(reason=Reason.USER_REQUESTED, requested_by=actor or "plane"),
            msg_id=f"plane:cancel:{run_id}:{cause}",
        )
        self._count("cancels")

    async def _cancel_flow(self, flow_run_id: str, actor: str | None, cause: str) -> None:
        await self._publish(
            subjects.flow_event(flow_run_id, FlowCancelRequested),
            FlowCancelRequested(requested_by=actor or "plane"),
            msg_id=f"plane:flow_cancel:{flow_run_id}:{cause}",
        )
        self._count("flow_cancels")
