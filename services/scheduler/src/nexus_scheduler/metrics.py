"""The scheduler's metrics (OpenTelemetry; Prometheus names in brackets): runs resumed after
their runner was lost, by the reason of the loss [nexus_scheduler_resumes_total], and runs
ended because the runner was lost with no attempt left, by reason
[nexus_scheduler_attempts_exhausted_total]; local runners started, by how: ``warm`` (a warm
runner handed the run) or ``cold`` [nexus_scheduler_runner_starts_total], and the idle warm
runners [nexus_scheduler_warm_runners_idle] (docs/warm-starts.md); runs asleep
[nexus_scheduler_runs_sleeping] and sleeping runs woken, by cause: ``timer``, ``signal`` or
``message`` [nexus_scheduler_wakes_total] (docs/resume.md, Sleep). Resumes are counted where
the leader publishes, so a takeover in the middle of a resume may count it twice. Without a
MeterProvider they are no-ops."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from enum import StrEnum

from opentelemetry.metrics import CallbackOptions, MeterProvider, NoOpMeterProvider, Observation

RESUMES = "nexus.scheduler.resumes"
ATTEMPTS_EXHAUSTED = "nexus.scheduler.attempts_exhausted"
RUNNER_STARTS = "nexus.scheduler.runner_starts"


class RunnerStart(StrEnum):
    """How a runner was started: the `start` label of RUNNER_STARTS."""

    WARM = "warm"  # a warm runner (process or pod started ahead) was handed the run
    COLD = "cold"  # a process or Job was started for the run


WARM_IDLE = "nexus.scheduler.warm_runners_idle"
SLEEPING = "nexus.scheduler.runs_sleeping"
WAKES = "nexus.scheduler.wakes"


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
        self._starts = meter.create_counter(
            RUNNER_STARTS, unit="{runner}", description="Local runners started, warm or cold."
        )
        self._idle: Callable[[], int] | None = None
        meter.create_observable_gauge(
            WARM_IDLE,
            callbacks=[self._observe_idle],
            unit="{runner}",
            description="Warm runners waiting for a run.",
        )
        self._wakes = meter.create_counter(
            WAKES, unit="{run}", description="Sleeping runs woken, by what woke them."
        )
        self._sleeping: Callable[[], int] | None = None
        meter.create_observable_gauge(
            SLEEPING,
            callbacks=[self._observe_sleeping],
            unit="{run}",
            description="Runs asleep: no runner, no slot, a wake time.",
        )

    def resumed(self, reason: str, attempt: int) -> None:
        self._resumes.add(1, {"reason": reason, "attempt": attempt})

    def exhausted(self, reason: str) -> None:
        self._exhausted.add(1, {"reason": reason})

    def runner_started(self, how: RunnerStart) -> None:
        self._starts.add(1, {"start": how})

    def observe_idle_runners(self, count: Callable[[], int]) -> None:
        self._idle = count

    def woke(self, cause: str) -> None:
        self._wakes.add(1, {"cause": cause})

    def observe_sleeping(self, count: Callable[[], int]) -> None:
        self._sleeping = count

    def _observe_sleeping(self, options: CallbackOptions) -> Iterable[Observation]:
        return [Observation(self._sleeping())] if self._sleeping is not None else []

    def _observe_idle(self, options: CallbackOptions) -> Iterable[Observation]:
        return [Observation(self._idle())] if self._idle is not None else []
