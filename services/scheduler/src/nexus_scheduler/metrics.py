"""The scheduler's metrics (OpenTelemetry; Prometheus names in brackets): runs resumed after
their runner was lost, by the reason of the loss [nexus_scheduler_resumes_total], and runs
ended because the runner was lost with no attempt left, by reason
[nexus_scheduler_attempts_exhausted_total]. Counted where the leader publishes, so a
takeover in the middle of a resume may count it twice. Without a MeterProvider they are
no-ops."""

from __future__ import annotations

from opentelemetry.metrics import MeterProvider, NoOpMeterProvider

RESUMES = "nexus.scheduler.resumes"
ATTEMPTS_EXHAUSTED = "nexus.scheduler.attempts_exhausted"


class SchedulerMetrics:
    def __init__(self, provider: MeterProvider | None = None) -> None:
        meter = (provider or NoOpMeterProvider()).get_meter("nexus_scheduler")
        self._resumes = meter.create_counter(
            RESUMES, unit="{attempt}", description="Attempts started after a runner loss."
        )
        self._exhausted = meter.create_counter(
            ATTEMPTS_EXHAUSTED,
            unit="{run}",
            description="Runs ended as their runner was lost with no attempt left.",
        )

    def resumed(self, reason: str, attempt: int) -> None:
        self._resumes.add(1, {"reason": reason, "attempt": attempt})

    def exhausted(self, reason: str) -> None:
        self._exhausted.add(1, {"reason": reason})
