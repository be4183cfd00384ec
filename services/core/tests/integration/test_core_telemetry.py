"""Spans per handled event: assembly and every projection continue the request's trace."""

from __future__ import annotations

from typing import Any

import pytest
from nexus_events.contract import subjects
from nexus_events.events import RunRequested
from nexus_events.runtime import telemetry
from nexus_events.transport.bus import Bus
from nexus_events.transport.catalog_commands import apply_agent, apply_skill
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from nexus_core.app import CoreApp

from .support import AGENT_YAML, SKILL_MD, catalog_ready, event_names, eventually


@pytest.fixture
def exporter(monkeypatch: pytest.MonkeyPatch):
    # As in nexus_events' own telemetry tests: a provider for this test only.
    monkeypatch.setattr(telemetry, "_installed", {})
    spans = InMemorySpanExporter()
    provider = telemetry.setup_telemetry("core-test", exporter=spans, env={})
    assert provider is not None
    yield spans
    provider.shutdown()


def _spans(exporter: InMemorySpanExporter, name: str, **attrs: Any) -> list[Any]:
    return [
        s
        for s in exporter.get_finished_spans()
        if s.name == name and all(s.attributes.get(k) == v for k, v in attrs.items())
    ]


async def test_each_handled_event_has_a_span_in_the_requests_trace(
    bus: Bus, exporter: InMemorySpanExporter, core: CoreApp
):
    await apply_agent(bus, AGENT_YAML)
    await apply_skill(bus, SKILL_MD)
    await catalog_ready(core)
    provider = telemetry._installed["provider"]
    with provider.get_tracer("client").start_as_current_span("ask for a run") as parent:
        await bus.publish(
            subjects.run_event("r-otel", "requested"),
            RunRequested(agent_id="implementer", task_id="T-otel", input="go"),
        )
    trace_id = parent.get_span_context().trace_id
    await eventually(lambda: event_names(bus, "r-otel"), lambda names: "prepared" in names)

    run = {"nexus.run_id": "r-otel"}
    assembled = await eventually(
        lambda: _async(_spans(exporter, "core assemble", **run)), lambda found: len(found) == 1
    )
    span = assembled[0]
    assert span.kind is SpanKind.CONSUMER
    assert span.context.trace_id == trace_id
    assert span.parent is not None
    assert span.parent.span_id == parent.get_span_context().span_id
    expected = {
        "nexus.run_id": "r-otel",
        "nexus.agent_id": "implementer",
        "nexus.task_id": "T-otel",
        "nexus.event": "requested",
        "nexus.outcome": "prepared",
    }
    assert expected.items() <= dict(span.attributes).items()

    # agent_runs and board each handle `requested` (in the request's trace) and `prepared`.
    for name in ("core project agent_runs", "core project board"):
        found = await eventually(
            lambda name=name: _async(_spans(exporter, name, **run)),
            lambda found: {s.attributes["nexus.event"] for s in found} >= {"requested", "prepared"},
        )
        requested = next(s for s in found if s.attributes["nexus.event"] == "requested")
        assert requested.context.trace_id == trace_id
        assert requested.attributes["nexus.task_id"] == "T-otel"
    runs_spans = _spans(exporter, "core project agent_runs", **run)
    assert {s.attributes["nexus.agent_id"] for s in runs_spans} == {"implementer"}

    catalog = _spans(exporter, "core project catalog")
    assert {(s.attributes["nexus.catalog.item"], s.attributes["nexus.event"]) for s in catalog} == {
        ("implementer", "applied"),
        ("python", "applied"),
    }


async def _async(value: Any) -> Any:
    return value
