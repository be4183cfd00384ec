"""Asking for a run or a flow run: the one subject, message id and publish of a request.

Every surface that requests work (the CLI and its MCP tools, plane-sync, the channel gateway,
the scheduler, the flows engine) goes through `request_run` / `request_flow` (or builds the
message with `run_request` / `flow_request` to publish it in a batch), so a request's
``Nats-Msg-Id`` has one format everywhere: ``<source>:<id>:requested``. The id is the run or
flow run id, so asking again for the same id (a retry, a redelivered webhook, a restarted
service) is stored once within JetStream's duplicate window; runs and flow runs live in their
own streams, whose windows are apart.
"""

from __future__ import annotations

from typing import Protocol

from nats.js.api import PubAck

from nexus_events.contract import subjects
from nexus_events.events.base import Event
from nexus_events.events.flows import FlowRequested
from nexus_events.events.runs import RunRequested
from nexus_events.transport.publish import Outgoing


class _Publishes(Protocol):
    async def publish(
        self,
        subject: str,
        event: Event,
        *,
        msg_id: str | None = None,
        correlation_id: str | None = None,
        causation_id: str | None = None,
    ) -> PubAck: ...


def request_msg_id(source: str, target_id: str) -> str:
    """``<source>:<id>:requested``: `source` names who asks (``cli``, ``plane``, ...)."""
    subjects.validate_token(source, "request source")
    return f"{source}:{target_id}:requested"


def run_request(
    run_id: str,
    request: RunRequested,
    *,
    source: str,
    correlation_id: str | None = None,
    causation_id: str | None = None,
) -> Outgoing:
    """The message asking for run `run_id`; `InvalidSubject` for an id that is no token."""
    return Outgoing(
        subjects.run_event(run_id, RunRequested),
        request,
        msg_id=request_msg_id(source, run_id),
        correlation_id=correlation_id,
        causation_id=causation_id,
    )


def flow_request(
    flow_run_id: str,
    request: FlowRequested,
    *,
    source: str,
    correlation_id: str | None = None,
    causation_id: str | None = None,
) -> Outgoing:
    """The message asking for flow run `flow_run_id`; `InvalidSubject` for a bad id."""
    return Outgoing(
        subjects.flow_event(flow_run_id, FlowRequested),
        request,
        msg_id=request_msg_id(source, flow_run_id),
        correlation_id=correlation_id,
        causation_id=causation_id,
    )


async def _send(bus: _Publishes, message: Outgoing) -> PubAck:
    return await bus.publish(
        message.subject,
        message.event,
        msg_id=message.msg_id,
        correlation_id=message.correlation_id,
        causation_id=message.causation_id,
    )


async def request_run(
    bus: _Publishes,
    run_id: str,
    request: RunRequested,
    *,
    source: str,
    correlation_id: str | None = None,
    causation_id: str | None = None,
) -> PubAck:
    """Publish the request for run `run_id`; returns once JetStream stored it.

    Raises `InvalidSubject` before sending anything when `run_id` is not a subject token,
    otherwise what `Publisher.publish` raises.
    """
    message = run_request(
        run_id, request, source=source, correlation_id=correlation_id, causation_id=causation_id
    )
    return await _send(bus, message)


async def request_flow(
    bus: _Publishes,
    flow_run_id: str,
    request: FlowRequested,
    *,
    source: str,
    correlation_id: str | None = None,
    causation_id: str | None = None,
) -> PubAck:
    """Publish the request for flow run `flow_run_id`; see `request_run`."""
    message = flow_request(
        flow_run_id,
        request,
        source=source,
        correlation_id=correlation_id,
        causation_id=causation_id,
    )
    return await _send(bus, message)
