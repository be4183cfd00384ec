"""Subject builders name an event by its enum member or model class, never a bare string."""

from __future__ import annotations

import pytest
from nexus_events.contract import subjects
from nexus_events.contract.runstate import RunEvent
from nexus_events.contract.subjects import Family
from nexus_events.errors import InvalidSubject
from nexus_events.events import (
    ApprovalDecided,
    CancelRequested,
    FlowAccepted,
    FlowRequested,
    RunCompleted,
    RunRequested,
    registered,
)


@pytest.mark.parametrize(
    ("ref", "name"),
    [
        (RunEvent.COMPLETED, "completed"),
        (RunCompleted, "completed"),
        (RunRequested, "requested"),
        (CancelRequested, "cancel_requested"),
        (ApprovalDecided, "approval_decided"),
    ],
)
def test_a_run_event_is_named_by_its_enum_member_or_model(ref: RunEvent, name: str) -> None:
    assert subjects.run_event("run_1", ref) == f"nexus.agent.run.v1.run_1.{name}"
    assert subjects.run_events_filter(event=ref) == f"nexus.agent.run.v1.*.{name}"


def test_a_flow_event_is_named_by_its_model() -> None:
    assert subjects.flow_event("f1", FlowRequested) == "nexus.flow.v1.f1.requested"
    assert subjects.flow_events_filter(None, FlowAccepted) == "nexus.flow.v1.*.accepted"


def test_every_run_model_declares_its_name_from_the_run_event_enum() -> None:
    # The class form of `run_event` is only as good as the names the models declare.
    run_models = {
        name: model for (family, name), model in registered().items() if family is Family.RUN
    }
    assert run_models
    assert set(run_models) == set(RunEvent)
    for name, model in run_models.items():
        assert subjects.run_event("r", model).endswith(f".{RunEvent(name).value}")


@pytest.mark.parametrize("name", list(RunEvent))
def test_an_outside_name_of_a_run_event_is_its_member(name: RunEvent) -> None:
    assert subjects.run_event_named(str(name.value)) is name


@pytest.mark.parametrize("bad", ["complete", "Completed", "", "flow.requested", "step_started"])
def test_an_outside_name_that_is_no_run_event_is_refused_with_the_choices(bad: str) -> None:
    with pytest.raises(InvalidSubject, match="unknown run event") as caught:
        subjects.run_event_named(bad)
    assert "cancel_requested" in str(caught.value)
