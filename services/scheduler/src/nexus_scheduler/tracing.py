"""The scheduler's spans (docs/design.md §11): one per handled run event, one per action.

A handled event gets a CONSUMER span continuing the trace in its own headers (per message,
not per fetched batch). The scheduler remembers, per run, the context of the first traced
event it saw for it (normally `prepared`, whose trace started at `requested`); what it then
does for the run (publish `queued`, start the runtime and publish `dispatched`, publish a
scheduler-made terminal event) happens in a span that is a child of that context, so those
events and the runner (which gets ``TRACEPARENT`` from the runtime) stay in the run's trace.

Without an SDK tracer provider no span is made, but the remembered context is still made
current around the actions: the trace context passes through to the events and the runner.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from typing import Any

from nexus_events.contract.codec import Decoded
from nexus_events.contract.spans import (
    AGENT_ID,
    ATTEMPT,
    OUTCOME,
    RUN_ID,
    RUNTIME,
    event_attributes,
    event_parent,
)
from nexus_events.runtime import telemetry
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Span, SpanKind

# The shared names the scheduler's spans carry (nexus_events.contract.spans owns them).
__all__ = ["AGENT_ID", "ATTEMPT", "OBSERVE_SPAN", "OUTCOME", "RUNTIME", "RunTraces"]

OBSERVE_SPAN = "scheduler observe"


def _has_span(ctx: otel_context.Context) -> bool:
    return trace.get_current_span(ctx).get_span_context().is_valid


def valid_traceparent(traceparent: str, tracestate: str | None = None) -> bool:
    """Whether `RunTraces.remember_headers` would keep a context for these headers."""
    return _has_span(telemetry.extract(telemetry.envelope_headers(traceparent, tracestate)))


class RunTraces:
    """Per run: the trace context the scheduler's actions for it continue."""

    def __init__(self) -> None:
        self._contexts: dict[str, otel_context.Context] = {}

    def __len__(self) -> int:
        return len(self._contexts)

    def get(self, run_id: str) -> otel_context.Context | None:
        return self._contexts.get(run_id)

    def remember(self, run_id: str, ctx: otel_context.Context) -> None:
        """Keep `ctx` for the run unless one is known already (the first traced event wins)."""
        if run_id not in self._contexts and _has_span(ctx):
            self._contexts[run_id] = ctx

    def restore(self, traced: Mapping[str, tuple[str, str | None]]) -> None:
        """`remember` the (traceparent, tracestate) of each run (from a snapshot)."""
        for run_id, (traceparent, tracestate) in traced.items():
            headers = telemetry.envelope_headers(traceparent, tracestate)
            self.remember(run_id, telemetry.extract(headers))

    def remember_headers(self, d: Decoded) -> None:
        """`remember` the trace in an event's headers (replay, or no tracer provider)."""
        run_id = d.address.run_id
        if run_id is None or run_id in self._contexts or not d.envelope.traceparent:
            return
        headers = telemetry.envelope_headers(d.envelope.traceparent, d.envelope.tracestate)
        self.remember(run_id, telemetry.extract(headers))

    def forget(self, run_id: str) -> None:
        self._contexts.pop(run_id, None)

    @contextlib.contextmanager
    def event_span(self, d: Decoded) -> Iterator[Span]:
        """A CONSUMER span for one handled run event, child of the trace in its headers, else
        of the run's remembered trace, else of the run's derived one (`spans.event_parent`);
        the run remembers it if it knew no trace yet."""
        run_id = d.address.run_id
        parent = event_parent(d, self.get(run_id) if run_id else None)
        attributes = event_attributes(d)
        with telemetry.tracer().start_as_current_span(
            OBSERVE_SPAN, context=parent, kind=SpanKind.CONSUMER, attributes=attributes
        ) as span:
            if run_id:
                self.remember(run_id, trace.set_span_in_context(span))
            yield span

    @contextlib.contextmanager
    def action(
        self, name: str, run_id: str, attributes: Mapping[str, Any] | None = None
    ) -> Iterator[Span | None]:
        """A span for something done for the run, child of the run's trace; what is published
        (and the runtime's ``TRACEPARENT``) inside it carries that trace."""
        parent = self.get(run_id)
        if not telemetry.enabled():
            # No span; still never the trace of whatever happens to be current (a batch's).
            token = otel_context.attach(parent or otel_context.Context())
            try:
                yield None
            finally:
                otel_context.detach(token)
            return
        attrs = {RUN_ID: run_id, **{k: v for k, v in (attributes or {}).items() if v is not None}}
        with telemetry.tracer().start_as_current_span(
            name, context=parent or otel_context.Context(), attributes=attrs
        ) as span:
            yield span
