"""What an agent may schedule: one valid trigger at least 60 s apart, under its cap, with an
id that a retried call keeps and that is a valid subject token."""

from __future__ import annotations

import pytest
from nexus_events.contract.subjects import validate_token
from nexus_events.events import AgentScheduleOp, AgentScheduleRequest
from nexus_scheduler.agent_schedule_rules import (
    ScheduleRefusedError,
    agent_schedule_id,
    check_cap,
    check_trigger,
)


def _create(**kw: object) -> AgentScheduleRequest:
    return AgentScheduleRequest.model_validate({"op": AgentScheduleOp.CREATE, "input": "x", **kw})


@pytest.mark.parametrize(
    ("trigger", "why"),
    [
        ({}, "exactly one of cron or interval_seconds"),
        ({"cron": "0 9 * * *", "interval_seconds": 600}, "exactly one of cron or interval_seconds"),
        ({"interval_seconds": 59}, "interval_seconds 59 is under the minimum of 60 s"),
        ({"cron": "* * * * * *"}, "invalid cron"),  # a seconds field
        ({"cron": "61 * * * *"}, "invalid cron '61 * * * *'"),
        ({"cron": "daily"}, "invalid cron 'daily'"),
    ],
)
def test_a_bad_trigger_is_refused_with_the_reason(trigger: dict[str, object], why: str) -> None:
    with pytest.raises(ScheduleRefusedError, match=why.replace("*", r"\*")):
        check_trigger(_create(**trigger))


@pytest.mark.parametrize("trigger", [{"interval_seconds": 60}, {"cron": "* * * * *"}])
def test_once_a_minute_is_allowed(trigger: dict[str, object]) -> None:
    check_trigger(_create(**trigger))


def test_the_cap_names_itself_and_its_setting() -> None:
    check_cap("impl", 49, 50)
    with pytest.raises(
        ScheduleRefusedError,
        match=r"has 50 schedules, the most allowed \(50, NEXUS_AGENT_SCHEDULES_MAX\)",
    ):
        check_cap("impl", 50, 50)
    with pytest.raises(ScheduleRefusedError, match="has 0 schedules"):
        check_cap("impl", 0, 0)


def test_the_id_is_the_same_for_a_retried_call_and_a_valid_token() -> None:
    first = agent_schedule_id("impl", "run-1", "call-7")
    assert first == agent_schedule_id("impl", "run-1", "call-7")
    assert first != agent_schedule_id("impl", "run-1", "call-8")
    assert first != agent_schedule_id("impl", "run-2", "call-7")
    assert first.startswith("agent-impl-")
    odd = agent_schedule_id("a.b c/" + "x" * 200, "run-1", "k")
    assert validate_token(odd) == odd
