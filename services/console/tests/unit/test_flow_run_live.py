"""What a flow event changes of its flow run's graph: the step record flowgraph.js applies."""

from __future__ import annotations

from typing import Any

from nexus_events.contract.subjects import Family
from nexus_events.events.flows import FlowEvent, StepStatus

from nexus_console.live.hub import LiveEvent
from nexus_console.pages.flow_runs import step_update


def event(name: FlowEvent, **body: Any) -> LiveEvent:
    return LiveEvent(
        Family.FLOW, f"nexus.flow.v1.fr.{name}", "NEXUS_FLOWS", 1, name, {"flow_run_id": "fr"},
        body,
    )  # fmt: skip


def test_a_step_finishing_is_its_state_with_done_and_its_run() -> None:
    update = step_update(
        event(FlowEvent.STEP_FINISHED, step="implement", round=2, status=StepStatus.FAILED,
              run_id="fr-implement-r2")
    )  # fmt: skip
    assert update == {
        "step": "implement", "state": StepStatus.FAILED,
        "classes": f"{StepStatus.FAILED} done", "round": 2, "run_id": "fr-implement-r2",
    }  # fmt: skip


def test_a_map_item_finishing_leaves_its_steps_state_alone() -> None:
    update = step_update(
        event(FlowEvent.STEP_FINISHED, step="each", round=1, item=3,
              status=StepStatus.SUCCEEDED, run_id="fr-each-r1-i3")
    )  # fmt: skip
    assert update is not None
    assert update["state"] is None
    assert update["classes"] == ""
    assert update["run_id"] == "fr-each-r1-i3"  # its run is still linked


def test_a_gate_waits_without_a_run_link_and_resumes_running() -> None:
    waiting = step_update(event(FlowEvent.WAITING, step="approve", round=1, kind="gate"))
    assert waiting is not None
    assert (waiting["state"], waiting["run_id"]) == (StepStatus.WAITING, None)
    started = step_update(
        event(FlowEvent.STEP_STARTED, step="approve", round=1, kind="gate", run_id="fr-approve-r1")
    )
    assert started is not None
    assert (started["state"], started["run_id"]) == (StepStatus.RUNNING, None)
    resumed = step_update(event(FlowEvent.RESUMED, step="approve", round=1, by="approved"))
    assert resumed is not None
    assert resumed["state"] == StepStatus.RUNNING


def test_events_of_the_whole_flow_change_no_step() -> None:
    assert step_update(event(FlowEvent.COMPLETED, reason="succeeded")) is None
    assert step_update(event(FlowEvent.ESCALATED, step="implement", round=3)) is None
