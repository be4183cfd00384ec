"""The flows service's metrics (OpenTelemetry; Prometheus names in brackets), read by
deploy/grafana/dashboards/flows.json: flow runs accepted [nexus_flows_started_total] and ended
by status [nexus_flows_finished_total], steps started by kind
[nexus_flow_steps_started_total], the hand-off from one step's end to the next step's run
request [nexus_flow_step_handoff_seconds] and gates waiting for a person
[nexus_flow_gates_waiting]. Counted where the engine publishes, so an event repeated after a
restart may count twice. Without a MeterProvider they are no-ops."""

from __future__ import annotations

from opentelemetry.metrics import MeterProvider, NoOpMeterProvider

STARTED = "nexus.flows.started"
FINISHED = "nexus.flows.finished"
STEPS_STARTED = "nexus.flow.steps_started"
HANDOFF = "nexus.flow.step_handoff"
GATES_WAITING = "nexus.flow.gates_waiting"


class FlowMetrics:
    def __init__(self, provider: MeterProvider | None = None) -> None:
        meter = (provider or NoOpMeterProvider()).get_meter("nexus_flows")
        self._started = meter.create_counter(
            STARTED, unit="{flow}", description="Flow runs accepted (pinned to a revision)."
        )
        self._finished = meter.create_counter(
            FINISHED, unit="{flow}", description="Flow runs ended, by status."
        )
        self._steps = meter.create_counter(
            STEPS_STARTED, unit="{step}", description="Steps started, by kind."
        )
        self._handoff = meter.create_histogram(
            HANDOFF,
            unit="s",
            description="From a step's end to the run request of the step after it.",
        )
        self._gates = meter.create_up_down_counter(
            GATES_WAITING, unit="{gate}", description="Gates waiting for a person."
        )

    def started(self) -> None:
        self._started.add(1)

    def finished(self, status: str) -> None:
        self._finished.add(1, {"status": str(status)})  # a FlowEvent member: its plain name

    def step_started(self, kind: str) -> None:
        self._steps.add(1, {"kind": kind})

    def handoff(self, seconds: float) -> None:
        self._handoff.record(max(seconds, 0.0))

    def gates(self, delta: int) -> None:
        self._gates.add(delta)
