"""What the lab counts when it publishes, read back from an in-memory OpenTelemetry reader."""

from __future__ import annotations

from typing import Any

from nexus_events.events.evals import (
    EvalAccepted,
    EvalCaseGraded,
    EvalCaseStarted,
    EvalCompleted,
    EvalFailed,
)
from nexus_events.transport.publish import Outgoing
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from nexus_lab.metrics import CASES_GRADED, EVAL_RUNS, LabMetrics


def sums(reader: InMemoryMetricReader) -> dict[str, dict[tuple[tuple[str, Any], ...], float]]:
    data = reader.get_metrics_data()
    assert data is not None
    out: dict[str, dict[tuple[tuple[str, Any], ...], float]] = {}
    for rm in data.resource_metrics:
        for sm in rm.scope_metrics:
            for m in sm.metrics:
                for p in m.data.data_points:
                    key = tuple(sorted((p.attributes or {}).items()))
                    out.setdefault(m.name, {})[key] = p.value  # type: ignore[union-attr]
    return out


def graded(passed: bool) -> EvalCaseGraded:
    return EvalCaseGraded(
        case="a", agent_id="i", revision=1, trial=1, run_id="r", passed=passed, status="completed"
    )


def test_eval_runs_by_status_and_cases_by_outcome() -> None:
    reader = InMemoryMetricReader()
    metrics = LabMetrics(MeterProvider(metric_readers=[reader]))
    accepted = EvalAccepted(
        suite="s", suite_revision=1, cases=["a"], revisions=[], trials=1, concurrency=1
    )
    metrics.count(
        Outgoing("s", e)
        for e in (
            accepted,
            EvalCaseStarted(case="a", agent_id="i", revision=1, trial=1, run_id="r"),
            graded(True),
            graded(False),
            graded(True),
            EvalCompleted(revisions=[]),
            EvalFailed(reason="unknown_suite"),
        )
    )
    found = sums(reader)
    assert found[EVAL_RUNS] == {
        (("status", "accepted"),): 1,
        (("status", "completed"),): 1,
        (("status", "failed"),): 1,
    }
    assert found[CASES_GRADED] == {(("outcome", "pass"),): 2, (("outcome", "fail"),): 1}
