"""What each flow event shows on its work item (`flowreports`): pure, no sockets."""

from __future__ import annotations

from nexus_events.events import (
    FlowAccepted,
    FlowCompleted,
    FlowDefinition,
    FlowFailed,
    FlowResumed,
    FlowStepFinished,
    FlowStepStarted,
    FlowWaiting,
)

from nexus_plane_sync.flowreports import flow_writes, verdict


def test_a_flow_without_a_task_writes_nothing() -> None:
    assert flow_writes(FlowCompleted(), "completed", "f1", None, "feature") == []


def test_write_ids_name_the_step_round_and_item() -> None:
    started = FlowStepStarted(step="review", kind="run", round=2, item=3, agent_id="reviewer")
    [w] = flow_writes(started, "step_started", "f1", "t1", "feature")
    assert w.write_id == "flow:f1:step_started:review:r2:i3"
    assert (w.op, w.task_id, w.run_id) == ("run_report", "t1", "f1")
    assert "reviewer" in w.payload["html"]
    assert "round 2, item 3" in w.payload["html"]
    # The same event again (re-published) is the same write: the outbox keeps one.
    assert flow_writes(started, "step_started", "f1", "t1", "feature") == [w]


def test_a_finished_step_shows_its_verdict_or_its_failure() -> None:
    ok = FlowStepFinished(step="review", status="succeeded", output={"verdict": "approve"})
    [w] = flow_writes(ok, "step_finished", "f1", "t1", "feature")
    assert "verdict <strong>approve</strong>" in w.payload["html"]
    bad = FlowStepFinished(step="test", status="failed", reason="invalid_output")
    [w] = flow_writes(bad, "step_finished", "f1", "t1", "feature")
    assert "failed (invalid_output)" in w.payload["html"]
    assert verdict({"decision": True}) == "True"
    assert verdict({}) is None


def test_a_gate_says_how_to_answer_and_escapes_its_summary() -> None:
    gate = FlowWaiting(
        step="ship", kind="gate", summary="<b>Ship</b>?", approval_id="g1", gate_run_id="f1-ship-r1"
    )
    [w] = flow_writes(gate, "waiting", "f1", "t1", "feature")
    assert "/approve g1" in w.payload["html"]
    assert "/deny g1" in w.payload["html"]
    assert "&lt;b&gt;Ship&lt;/b&gt;?" in w.payload["html"]
    assert w.payload["activity"] == "elicitation"


def test_ends_and_decisions_are_shown_and_the_rest_is_not() -> None:
    [end] = flow_writes(FlowFailed(reason="step_failed", step="test"), "failed", "f1", "t1", None)
    assert end.write_id == "flow:f1:failed"
    assert "step_failed" in end.payload["html"]
    decided = FlowResumed(step="ship", by="approved", decided_by="ada")
    [w] = flow_writes(decided, "resumed", "f1", "t1", "feature")
    assert "approved by ada" in w.payload["html"]
    assert flow_writes(FlowResumed(step="wait", by="timer"), "resumed", "f1", "t1", "f") == []
    definition = FlowDefinition.model_validate(
        {"id": "feature", "steps": [{"id": "a", "kind": "run", "agent": "x"}]}
    )
    accepted = FlowAccepted(flow="feature", revision=1, definition=definition)
    assert flow_writes(accepted, "accepted", "f1", "t1", "feature") == []
