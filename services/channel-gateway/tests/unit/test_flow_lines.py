"""The chat lines of flow events (`flownotifier.describe`, `step_key`): pure, no sockets."""

from __future__ import annotations

from nexus_events.events import (
    FlowCancelled,
    FlowCompleted,
    FlowResumed,
    FlowStepFinished,
    FlowStepStarted,
)

from nexus_channel_gateway.flownotifier import describe, step_key


def test_steps_say_their_agent_verdict_or_failure() -> None:
    started = FlowStepStarted(step="review", kind="run", round=2, agent_id="reviewer")
    assert describe("feature", "step_started", started) == (
        "▶️ Flow `feature`: step `review`, round 2 (reviewer) started."
    )
    ok = FlowStepFinished(step="review", status="succeeded", output={"verdict": "approve"})
    assert "verdict `approve`" in (describe("feature", "step_finished", ok) or "")
    bad = FlowStepFinished(step="test", status="failed", reason="invalid_output")
    assert "failed: invalid_output" in (describe("feature", "step_finished", bad) or "")


def test_ends_and_gate_decisions_and_nothing_for_timers() -> None:
    assert describe("feature", "completed", FlowCompleted()) == "🏁 Flow `feature` completed."
    cancelled = describe("feature", "cancelled", FlowCancelled(message="by ada"))
    assert cancelled == "❌ Flow `feature` was cancelled: user_requested (by ada)"
    decided = FlowResumed(step="ship", by="denied", decided_by="slack:U2")
    assert (
        describe("feature", "resumed", decided)
        == "🔓 Flow `feature`: gate `ship` denied by slack:U2."
    )
    assert describe("feature", "resumed", FlowResumed(step="w", by="timer")) is None


def test_keys_name_the_flow_event_step_round_and_item() -> None:
    event = FlowStepStarted(step="impl", kind="map", round=1, item=4)
    assert step_key("f1", "step_started", event) == "flow:f1:step_started:impl:r1:i4"
