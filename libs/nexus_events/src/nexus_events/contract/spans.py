"""Span vocabulary every service shares (docs/design.md §11): attribute names, the
attributes of a handled event, and which trace a handled event's span continues.

Attribute names follow the OpenTelemetry messaging and GenAI conventions where they exist and
``nexus.*`` otherwise; services import them from here so a dashboard or a Tempo query means the
same thing for every service.

One rule for an event's parent, whoever handles it (`event_parent`): the trace in its own
headers; for a header-less event (a bare ``nats pub``), the run's trace when the handler knows
it (the scheduler remembers it per run), else the run's derived trace
(`telemetry.run_traceparent`), so every handler of a header-less `requested` joins one trace.
"""

from __future__ import annotations

from typing import Any

from opentelemetry import context as otel_context

from nexus_events.contract.codec import Decoded
from nexus_events.runtime import telemetry

# -- nexus.* ------------------------------------------------------------------------------
RUN_ID = "nexus.run_id"
AGENT_ID = "nexus.agent_id"
TASK_ID = "nexus.task_id"
EVENT = "nexus.event"
OUTCOME = "nexus.outcome"
REASON = "nexus.reason"
ATTEMPT = "nexus.attempt"
RUNTIME = "nexus.runtime"
CATALOG_ITEM = "nexus.catalog.item"
# -- OpenTelemetry messaging conventions ------------------------------------------------------
STREAM_SEQ = "messaging.nats.stream_sequence"
SUBJECT = "messaging.destination.name"


def event_attributes(d: Decoded, **extra: Any) -> dict[str, Any]:
    """The attributes every handled-event span carries, plus `extra` (None values dropped)."""
    attrs: dict[str, Any] = {
        EVENT: d.address.event or type(d.event).__name__,
        SUBJECT: d.envelope.subject,
        STREAM_SEQ: d.envelope.stream_seq or 0,
    }
    if d.address.run_id:
        attrs[RUN_ID] = d.address.run_id
    attrs.update({k: v for k, v in extra.items() if v is not None})
    return attrs


def event_headers(d: Decoded) -> dict[str, str]:
    """The W3C headers of the trace a handled event continues when nothing else is known: its
    own, else its run's derived trace, else none."""
    env = d.envelope
    return telemetry.envelope_headers(env.traceparent, env.tracestate, run_id=d.address.run_id)


def event_parent(d: Decoded, known: otel_context.Context | None = None) -> otel_context.Context:
    """The context a handled event's span is a child of (the module's rule): its own headers,
    else `known` (the run's trace, if the handler keeps one), else the run's derived trace."""
    if d.envelope.traceparent:
        return telemetry.extract(
            telemetry.envelope_headers(d.envelope.traceparent, d.envelope.tracestate)
        )
    if known is not None:
        return known
    headers = event_headers(d)
    return telemetry.extract(headers) if headers else otel_context.Context()


__all__ = [
    "AGENT_ID",
    "ATTEMPT",
    "CATALOG_ITEM",
    "EVENT",
    "OUTCOME",
    "REASON",
    "RUNTIME",
    "RUN_ID",
    "STREAM_SEQ",
    "SUBJECT",
    "TASK_ID",
    "event_attributes",
    "event_headers",
    "event_parent",
]
