"""The scheduler's spans: one per handled event; its events and runtime starts in the run's
trace."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from nexus_events.contract import subjects
from nexus_events.contract.streams import RUNS
from nexus_events.events import CancelRequested, RunConfig, RunPrepared
from nexus_events.runtime import telemetry
from nexus_events.transport.bus import Bus
from nexus_scheduler.runtime.base import RunHandle
from nexus_scheduler.runtime.kubernetes import KubernetesSettings, build_job
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from tests.support.noop_runtime import NoopRuntime

from ..factories import config
from ..waiting import eventually
from .conftest import AppFactory, events_by_run, publish


class TracingRuntime(NoopRuntime):
    """Records the TRACEPARENT a real runtime would hand to the runner."""

    def __init__(self) -> None:
        super().__init__()
        self.trace_env: dict[str, dict[str, str]] = {}

    async def start_run(self, config: RunConfig) -> RunHandle:
        self.trace_env[config.run_id] = telemetry.trace_env()
        return await super().start_run(config)


@pytest.fixture
def exporter(monkeypatch: pytest.MonkeyPatch) -> Iterator[InMemorySpanExporter]:
    monkeypatch.setattr(telemetry, "_installed", {})
    spans = InMemorySpanExporter()
    provider = telemetry.setup_telemetry("scheduler-test", exporter=spans, env={})
    assert provider is not None
    yield spans
    provider.shutdown()


def _trace_id(traceparent: str | None) -> str | None:
    return traceparent.split("-")[1] if traceparent else None


async def _traceparents(bus: Bus) -> dict[tuple[str, str], str | None]:
    """(run id, event) -> the trace id its headers carry."""
    out = {}
    async for d in bus.replay(RUNS):
        assert d.address.run_id is not None
        assert d.address.event is not None
        out[(d.address.run_id, d.address.event)] = _trace_id(d.envelope.traceparent)
    return out


async def _publish_prepared_in_span(bus: Bus, tracer: Any, run_id: str) -> str:
    with tracer.start_as_current_span(f"prepare {run_id}") as span:
        await bus.publish(
            subjects.run_event(run_id, "prepared"), RunPrepared(config=config(run_id))
        )
    return f"{span.get_span_context().trace_id:032x}"


async def test_events_and_runtime_starts_continue_the_runs_trace(
    make_app: AppFactory, bus: Bus, exporter: InMemorySpanExporter
) -> None:
    runtime = TracingRuntime()
    await make_app(runtime, max_concurrent_runs=1)
    tracer = telemetry.tracer()
    trace_a = await _publish_prepared_in_span(bus, tracer, "a")
    trace_b = await _publish_prepared_in_span(bus, tracer, "b")
    await eventually(
        lambda: _has(bus, [("a", "dispatched"), ("b", "queued")]), what="a dispatched, b queued"
    )
    # A cancel from elsewhere (no trace): the scheduler-made ending stays in b's trace.
    await publish(bus, "b", CancelRequested(requested_by="alice"))
    await eventually(lambda: _has(bus, [("b", "cancelled")]), what="b cancelled")

    carried = await _traceparents(bus)
    assert carried[("a", "dispatched")] == trace_a
    assert carried[("b", "queued")] == trace_b
    assert carried[("b", "cancelled")] == trace_b
    assert carried[("b", "cancel_requested")] is None

    # The runtime got a TRACEPARENT of a's trace: the dispatch span, child of a's handling.
    spans = exporter.get_finished_spans()
    by_id = {s.context.span_id: s for s in spans}
    [dispatch] = [s for s in spans if s.name == "scheduler dispatch"]
    assert _trace_id(runtime.trace_env["a"]["TRACEPARENT"]) == trace_a
    assert runtime.trace_env["a"]["TRACEPARENT"].split("-")[2] == f"{dispatch.context.span_id:016x}"
    assert dispatch.parent is not None
    handled = by_id[dispatch.parent.span_id]
    assert handled.name == "scheduler observe"
    assert handled.kind is SpanKind.CONSUMER
    assert dict(handled.attributes or {})["nexus.event"] == "prepared"
    assert dict(handled.attributes or {})["nexus.run_id"] == "a"
    assert dispatch.attributes is not None
    assert dispatch.attributes["nexus.outcome"] == "dispatched"

    # One observe span per handled event (per message, not per batch), each in its own trace;
    # the untraced cancel_requested is parented to b's trace.
    observed = {
        (s.attributes["nexus.run_id"], s.attributes["nexus.event"]): f"{s.context.trace_id:032x}"
        for s in spans
        if s.name == "scheduler observe" and s.attributes is not None
    }
    assert observed[("a", "prepared")] == trace_a
    assert observed[("b", "prepared")] == trace_b
    assert observed[("b", "cancel_requested")] == trace_b
    ends = [s for s in spans if s.name == "scheduler end"]
    assert [(s.attributes or {}).get("nexus.outcome") for s in ends] == ["cancelled"]
    assert f"{ends[0].context.trace_id:032x}" == trace_b


async def test_trace_context_passes_through_without_a_tracer_provider(
    make_app: AppFactory, bus: Bus, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(telemetry, "enabled", lambda: False)
    runtime = TracingRuntime()
    await make_app(runtime, max_concurrent_runs=1)
    # The publisher traces (its own provider), the scheduler does not.
    tracer = TracerProvider().get_tracer("publisher")
    trace_a = await _publish_prepared_in_span(bus, tracer, "a")
    trace_b = await _publish_prepared_in_span(bus, tracer, "b")
    await eventually(
        lambda: _has(bus, [("a", "dispatched"), ("b", "queued")]), what="a dispatched, b queued"
    )
    carried = await _traceparents(bus)
    assert carried[("a", "dispatched")] == trace_a
    assert carried[("b", "queued")] == trace_b
    assert _trace_id(runtime.trace_env["a"]["TRACEPARENT"]) == trace_a


def test_kubernetes_job_hands_the_trace_context_to_the_pod() -> None:
    env = {"TRACEPARENT": "00-" + "1" * 32 + "-" + "2" * 16 + "-01", "TRACESTATE": "k=v"}
    job = build_job(config("k"), KubernetesSettings(), env)
    container = job.spec.template.spec.containers[0]
    got = {e.name: e.value for e in container.env}
    assert got["TRACEPARENT"] == env["TRACEPARENT"]
    assert got["TRACESTATE"] == "k=v"
    plain = build_job(config("k"), KubernetesSettings()).spec.template.spec.containers[0]
    assert "TRACEPARENT" not in {e.name for e in plain.env}


async def _has(bus: Bus, wanted: list[tuple[str, str]]) -> bool:
    by_run = await events_by_run(bus)
    return all(event in by_run.get(run_id, []) for run_id, event in wanted)
