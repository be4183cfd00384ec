"""The lab's metrics (OpenTelemetry; Prometheus names in brackets): eval runs accepted, completed
or failed [nexus_lab_eval_runs_total{status}] and case runs graded by outcome (pass or fail)
[nexus_lab_cases_graded_total{outcome}]. Counted where the engine publishes, so an event
repeated after a restart may count twice. Without a MeterProvider they are no-ops."""

from __future__ import annotations

from collections.abc import Iterable

from nexus_events.events.evals import EvalAccepted, EvalCaseGraded, EvalCompleted, EvalFailed
from nexus_events.transport.publish import Outgoing
from opentelemetry.metrics import MeterProvider, NoOpMeterProvider

EVAL_RUNS = "nexus.lab.eval_runs"
CASES_GRADED = "nexus.lab.cases_graded"


class LabMetrics:
    def __init__(self, provider: MeterProvider | None = None) -> None:
        meter = (provider or NoOpMeterProvider()).get_meter("nexus_lab")
        self._eval_runs = meter.create_counter(
            EVAL_RUNS, unit="{eval_run}", description="Eval runs accepted, completed or failed."
        )
        self._graded = meter.create_counter(
            CASES_GRADED, unit="{run}", description="Case runs graded, by outcome."
        )

    def eval_run(self, status: str) -> None:
        self._eval_runs.add(1, {"status": str(status)})  # an EvalEvent member: its plain name

    def case_graded(self, passed: bool) -> None:
        self._graded.add(1, {"outcome": "pass" if passed else "fail"})

    def count(self, published: Iterable[Outgoing]) -> None:
        """Count what the engine just published."""
        for out in published:
            event = out.event
            if isinstance(event, EvalAccepted | EvalCompleted | EvalFailed):
                self.eval_run(event.event_name)
            elif isinstance(event, EvalCaseGraded):
                self.case_graded(event.passed)
