"""Spans per handled event (docs/design.md §11): CONSUMER spans that continue the event's trace.

Projections handle tens of thousands of events a second on replay, and even a no-op span
costs ~25 us, so per-event spans are opened only while an SDK tracer provider is installed
(`nexus_events.runtime.telemetry.setup_telemetry`); otherwise `event_span` is a null context.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from typing import Any

from nexus_events.contract.codec import Decoded
from nexus_events.contract.spans import (
    AGENT_ID,
    CATALOG_ITEM,
    OUTCOME,
    TASK_ID,
    event_attributes,
    event_headers,
)
from nexus_events.runtime import telemetry
from opentelemetry.trace import Span

# The shared names core's handlers put on their spans (nexus_events.contract.spans owns them).
__all__ = [
    "AGENT_ID",
    "CATALOG_ITEM",
    "OUTCOME",
    "TASK_ID",
    "event_span",
    "spans_for",
    "tracing_enabled",
]


# What `spans_for` gives while nothing records: no per-event cost beyond one check per batch.
_NO_SPAN: contextlib.nullcontext[None] = contextlib.nullcontext()


def tracing_enabled() -> bool:
    """Whether spans are recorded: `setup_telemetry` installed an SDK provider."""
    return telemetry.enabled()


def spans_for(name: str) -> Any:
    """A per-batch factory: `spans(d, attrs)` is `event_span(name, d, attrs)` while tracing is
    enabled, else a shared null context (checked once, when the batch starts)."""
    if not tracing_enabled():
        return lambda d, attributes=None: _NO_SPAN
    return lambda d, attributes=None: event_span(name, d, attributes)


@contextlib.contextmanager
def event_span(
    name: str, d: Decoded, attributes: Mapping[str, Any] | None = None
) -> Iterator[Span | None]:
    """A CONSUMER span for one handled event, child of the trace in its headers (or None)."""
    if not tracing_enabled():
        yield None
        return
    with telemetry.consumer_span(
        name, event_headers(d), {**event_attributes(d), **(attributes or {})}
    ) as span:
        yield span
