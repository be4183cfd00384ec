"""Trace context crosses the bus: the consumer span continues the publisher's trace."""

from __future__ import annotations

import uuid

import pytest
from nexus_events.contract import subjects
from nexus_events.contract.streams import RUNS
from nexus_events.events import RunHeartbeat
from nexus_events.runtime import telemetry
from nexus_events.transport.bus import Bus, ConsumerSpec, Delivery
from nexus_testing import eventually
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind


@pytest.fixture
def exporter(monkeypatch):
    # Install a provider for this test only; the OTel global can be set once per process,
    # so Nexus spans come from the provider setup_telemetry made last (telemetry._installed).
    monkeypatch.setattr(telemetry, "_installed", {})
    spans = InMemorySpanExporter()
    provider = telemetry.setup_telemetry("telemetry-test", exporter=spans, env={})
    assert provider is not None
    yield spans
    provider.shutdown()


def _consumer_spans(exporter: InMemorySpanExporter, n: int) -> list | None:
    found = [s for s in exporter.get_finished_spans() if s.kind is SpanKind.CONSUMER]
    assert len(found) <= n, found
    return found if len(found) == n else None


async def test_consumer_span_has_the_publishers_trace_id(bus: Bus, exporter):
    provider = telemetry._installed["provider"]
    subject = subjects.run_event("run_t", "heartbeat")
    with provider.get_tracer("publisher").start_as_current_span("publish heartbeat") as parent:
        await bus.publish(subject, RunHeartbeat(seq=1))
    # A second message published outside any span carries no trace context.
    await bus.publish(subject, RunHeartbeat(seq=2))
    publisher = parent.get_span_context()

    deliveries: list[Delivery] = []

    async def handler(batch: list[Delivery]) -> None:
        deliveries.extend(batch)

    spec = ConsumerSpec(RUNS, f"tel-{uuid.uuid4().hex[:8]}", batch=1, fetch_timeout=0.5)
    async with bus.consumer(spec, handler):
        await eventually(lambda: len(deliveries) == 2, what="both deliveries")
        consumed = await eventually(
            lambda: _consumer_spans(exporter, 2), what="two finished consumer spans"
        )

    traced, untraced = deliveries
    assert traced.envelope.traceparent is not None
    assert traced.envelope.traceparent.split("-")[1] == f"{publisher.trace_id:032x}"
    assert untraced.envelope.traceparent is None

    first, second = consumed
    assert first.name == f"consume {spec.durable}"
    assert first.context.trace_id == publisher.trace_id
    assert first.parent is not None
    assert first.parent.span_id == publisher.span_id
    assert second.context.trace_id != publisher.trace_id
    assert second.parent is None
