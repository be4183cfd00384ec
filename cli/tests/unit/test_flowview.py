"""`nexus flow` reads the contract's flow vocabulary: every flow event has its own line, and
the events that end a flow run (and only those) end `nexus flow run --follow`."""

from __future__ import annotations

from nexus_events.events.flows import (
    FlowCancelled,
    FlowCompleted,
    FlowEvent,
    FlowFailed,
    FlowStepFinished,
)

from nexus_cli.errors import ExitCode
from nexus_cli.flowview import FLOW_ENDS, describe_flow_event


def test_the_terminal_events_end_a_follow_with_their_exit_codes() -> None:
    assert {
        FlowCompleted.event_name: ExitCode.OK,
        FlowFailed.event_name: ExitCode.RUN_FAILED,
        FlowCancelled.event_name: ExitCode.RUN_FAILED,
    } == FLOW_ENDS
    assert "completed" in FLOW_ENDS  # looked up by the subject's last token, a plain str


def test_every_flow_event_has_a_line_of_its_own() -> None:
    body = {"step": "s", "round": 1, "status": "failed", "reason": "r", "message": "m"}
    for name in FlowEvent:
        assert describe_flow_event("fr", name, body) != name.value, name


def test_a_finished_step_shows_its_reason_unless_it_succeeded() -> None:
    failed = FlowStepFinished(step="s", status="failed", reason="boom")
    ok = FlowStepFinished(step="s", status="succeeded")
    assert describe_flow_event("fr", "step_finished", failed.model_dump(mode="json")) == (
        "step s failed (boom)"
    )
    assert describe_flow_event("fr", "step_finished", ok.model_dump(mode="json")) == (
        "step s succeeded"
    )
