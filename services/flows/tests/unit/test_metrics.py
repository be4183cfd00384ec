"""What the engine counts when it publishes, read back from an in-memory OpenTelemetry reader."""

from __future__ import annotations

from typing import Any

from nexus_events.events.flows import (
    FlowCompleted,
    FlowResumed,
    FlowStepStarted,
    FlowWaiting,
)
from nexus_events.transport.bus import Outgoing
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from nexus_flows.engine import Engine
from nexus_flows.metrics import FlowMetrics


def points(reader: InMemoryMetricReader) -> dict[str, list[tuple[dict[str, Any], float]]]:
    data = reader.get_metrics_data()
    assert data is not None
    out: dict[str, list[tuple[dict[str, Any], float]]] = {}
    for rm in data.resource_metrics:
        for sm in rm.scope_metrics:
            for m in sm.metrics:
                for p in m.data.data_points:
                    value = getattr(p, "value", None)
                    out.setdefault(m.name, []).append(
                        (dict(p.attributes or {}), value if value is not None else p.count)  # type: ignore[attr-defined]
                    )
    return out


def test_the_engine_counts_steps_gates_and_ends() -> None:
    reader = InMemoryMetricReader()
    engine = Engine(None, None, metrics=FlowMetrics(MeterProvider(metric_readers=[reader])))  # type: ignore[arg-type]
    published = [
        Outgoing("s", FlowStepStarted(step="plan", kind="run", run_id="f-plan-r1")),
        Outgoing("s", FlowStepStarted(step="m", kind="map", item=None)),
        Outgoing("s", FlowStepStarted(step="m", kind="run", item=0, run_id="f-m-r1-i0")),
        Outgoing("s", FlowWaiting(step="g", kind="gate", approval_id="a1")),
        Outgoing("s", FlowWaiting(step="w", kind="timer")),
        Outgoing("s", FlowResumed(step="g", by="approved")),
        Outgoing("s", FlowResumed(step="w", by="timer")),
        Outgoing("s", FlowCompleted()),
    ]
    engine._count(published)
    engine.metrics.handoff(0.25)
    got = points(reader)
    steps = {a["kind"]: v for a, v in got["nexus.flow.steps_started"]}
    assert steps == {"run": 1, "map": 1}  # a map's item runs are not steps of their own
    assert got["nexus.flow.gates_waiting"] == [({}, 0)]  # one gate waited, then was decided
    assert got["nexus.flows.finished"] == [({"status": "completed"}, 1)]
    assert got["nexus.flow.step_handoff"] == [({}, 1)]
