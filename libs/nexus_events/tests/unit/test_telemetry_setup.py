"""Telemetry setup and W3C trace context in headers, without a server."""

from __future__ import annotations

import pytest
from nexus_events.runtime import telemetry
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind


@pytest.fixture(autouse=True)
def _isolated_provider(monkeypatch):
    # Whatever these tests install is forgotten afterwards (the OTel global stays as it is).
    monkeypatch.setattr(telemetry, "_installed", {})


def test_nothing_is_installed_without_exporter_or_endpoint():
    assert telemetry.setup_telemetry("core", env={}) is None
    assert (
        telemetry.setup_telemetry(
            "core", exporter=InMemorySpanExporter(), env={"OTEL_SDK_DISABLED": "true"}
        )
        is None
    )


def test_inject_then_extract_gives_the_consumer_span_the_same_trace():
    exporter = InMemorySpanExporter()
    provider = telemetry.setup_telemetry("core", exporter=exporter, env={})
    assert provider is not None
    with provider.get_tracer("test").start_as_current_span("publish") as parent:
        headers = telemetry.inject({"Nexus-Source": "core"})
    assert headers["traceparent"].split("-")[1] == f"{parent.get_span_context().trace_id:032x}"

    with telemetry.consumer_span("consume x", headers, {"k": "v"}) as span:
        assert span.get_span_context().trace_id == parent.get_span_context().trace_id
    [finished] = [s for s in exporter.get_finished_spans() if s.name == "consume x"]
    assert finished.kind is SpanKind.CONSUMER
    assert finished.parent is not None
    assert finished.parent.span_id == parent.get_span_context().span_id
    assert finished.attributes["k"] == "v"


def test_without_trace_headers_the_consumer_span_starts_a_new_trace():
    exporter = InMemorySpanExporter()
    telemetry.setup_telemetry("core", exporter=exporter, env={})
    with telemetry.consumer_span("orphan", None):
        pass
    [finished] = exporter.get_finished_spans()
    assert finished.parent is None


def test_a_second_setup_gets_its_own_spans():
    # OTel's global provider can be set once per process; Nexus spans follow the last setup.
    first, second = InMemorySpanExporter(), InMemorySpanExporter()
    telemetry.setup_telemetry("one", exporter=first, env={})
    telemetry.setup_telemetry("two", exporter=second, env={})
    with telemetry.consumer_span("after second setup", {}):
        pass
    assert [s.name for s in second.get_finished_spans()] == ["after second setup"]
    assert first.get_finished_spans() == ()
    [span] = second.get_finished_spans()
    assert span.resource.attributes["service.name"] == "nexus-two"


def test_a_run_without_trace_headers_gets_a_trace_derived_from_its_run_id() -> None:
    from nexus_events.runtime.telemetry import envelope_headers, extract, run_traceparent
    from opentelemetry import trace as otel_trace

    first = envelope_headers(None, run_id="run-1")
    assert first == envelope_headers(None, run_id="run-1")  # the same for every service
    assert first != envelope_headers(None, run_id="run-2")
    assert envelope_headers(None) == {}
    given = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    assert envelope_headers(given, run_id="run-1") == {"traceparent": given}
    ctx = otel_trace.get_current_span(extract(first)).get_span_context()
    assert ctx.is_valid
    assert ctx.is_remote
    assert f"{ctx.trace_id:032x}" == run_traceparent("run-1").split("-")[1]
