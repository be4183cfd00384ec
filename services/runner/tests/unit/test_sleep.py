"""The `sleep` tool's arguments, the wake note and the wall clock less the sleep: pure, on an
injected time (docs/resume.md, Sleep)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from nexus_events.events.runs import RunWake, WakeCause
from pydantic import ValidationError

from nexus_runner.errors import ToolError
from nexus_runner.guard.policy import judge_builtin
from nexus_runner.guard.verdict import Outcome
from nexus_runner.resume import History, Resumption
from nexus_runner.tools.sleep import SleepArgs, accepted_answer, plan_sleep
from nexus_runner.transcript import Folded
from nexus_runner.waking import WOKE, wake_message, wake_note

NOW = datetime(2026, 11, 29, 1, 0, 0, tzinfo=UTC)
DAY = 86_400


def args(**kw: Any) -> SleepArgs:
    return SleepArgs.model_validate({"reason": "waiting for CI", **kw})


def refusal(max_seconds: int = DAY, **kw: Any) -> str:
    with pytest.raises(ToolError) as caught:
        plan_sleep(args(**kw), NOW, max_seconds)
    return str(caught.value)


def test_seconds_wake_that_many_seconds_from_now() -> None:
    plan = plan_sleep(args(seconds=5), NOW, DAY)
    assert plan.until == NOW + timedelta(seconds=5)
    assert plan.reason == "waiting for CI"
    assert accepted_answer(plan).startswith("sleeping until 2026-11-29T01:00:05Z (waiting for CI)")


@pytest.mark.parametrize(
    ("until", "expected"),
    [
        ("2026-11-29T02:00:00Z", datetime(2026, 11, 29, 2, tzinfo=UTC)),
        ("2026-11-29T02:00:00", datetime(2026, 11, 29, 2, tzinfo=UTC)),  # naive = UTC
        ("2026-11-29T03:30:00+02:00", datetime(2026, 11, 29, 1, 30, tzinfo=UTC)),
    ],
)
def test_until_is_read_as_iso_8601_in_utc(until: str, expected: datetime) -> None:
    assert plan_sleep(args(until=until), NOW, DAY).until == expected


def test_both_or_neither_is_refused() -> None:
    assert "exactly one of `seconds` or `until` (both given)" in refusal(
        seconds=5, until="2026-11-29T02:00:00Z"
    )
    assert "(neither given)" in refusal()


def test_an_unreadable_time_is_refused() -> None:
    assert "'tomorrow' is not an ISO-8601 time" in refusal(until="tomorrow")


def test_a_past_or_too_near_wake_is_refused() -> None:
    assert "2026-11-29T00:00:00Z is in the past (it is now 2026-11-29T01:00:00Z)" in refusal(
        until="2026-11-29T00:00:00Z"
    )
    assert "is in the past" in refusal(seconds=-3)
    assert "sleep at least 1 s" in refusal(seconds=0.5)
    assert "sleep at least 1 s" in refusal(until="2026-11-29T01:00:00Z")


def test_longer_than_the_agents_limit_is_refused_naming_it() -> None:
    message = refusal(max_seconds=3600, seconds=3601)
    assert "resume.max_sleep_seconds = 3600 s" in message
    assert "resume.max_sleep_seconds = 3600 s" in refusal(
        max_seconds=3600, until="2026-11-29T02:00:01Z"
    )
    assert "limit" in refusal(seconds=1e300)  # absurd: refused, no overflow
    assert "finite" in refusal(seconds=float("inf"))
    assert plan_sleep(args(seconds=3600), NOW, 3600).until == NOW + timedelta(hours=1)


def test_an_agent_that_may_not_sleep_is_refused() -> None:
    assert "may not sleep (its resume.max_sleep_seconds is 0)" in refusal(max_seconds=0, seconds=5)


def test_a_reason_is_required_and_bounded() -> None:
    with pytest.raises(ValidationError):
        SleepArgs.model_validate({"seconds": 5})
    with pytest.raises(ValidationError):
        SleepArgs.model_validate({"seconds": 5, "reason": "x" * 2001})


def test_the_dial_never_asks_for_a_sleep() -> None:
    for mode in ("off", "curated", "all_but_destructive"):
        assert judge_builtin("sleep", None, mode, None).outcome is Outcome.RUN


# -- the wake note -----------------------------------------------------------------------


def slept(answer: str = accepted_answer(plan_sleep(args(seconds=60), NOW, DAY))) -> list[Any]:
    call = {"id": "z1", "type": "function", "function": {"name": "sleep", "arguments": "{}"}}
    return [
        {"role": "system", "content": "s"},
        {"role": "user", "content": "task"},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "z1", "content": answer},
    ]


WAKE = RunWake(
    cause=WakeCause.SIGNAL,
    slept_until=NOW + timedelta(minutes=1),
    sleep_reason="waiting for CI",
    text="CI is green",
    requested_by="ann",
)


def test_the_woken_attempt_is_told_why_once() -> None:
    later = NOW + timedelta(seconds=20)
    message = wake_message(slept(), WAKE, later)
    assert message == {
        "role": "user",
        "content": "[woke] You slept until 2026-11-29T01:01:00Z (waiting for CI); woken by a"
        " wake request from ann: CI is green. It is now 2026-11-29T01:00:20Z.",
    }
    # Already told (a later resume of the woken attempt): not again.
    assert wake_message([*slept(), message], WAKE, later) is None


def test_the_timer_and_a_message_read_as_such() -> None:
    timer = WAKE.model_copy(update={"cause": WakeCause.TIMER, "text": "", "requested_by": None})
    assert "woken by the timer (the wake time came)." in wake_note(timer, NOW)
    message = WAKE.model_copy(update={"cause": WakeCause.MESSAGE, "text": "ship it"})
    assert "woken by a message from ann: ship it." in wake_note(message, NOW)


def test_no_note_without_an_accepted_sleep() -> None:
    assert wake_message(slept()[:2], WAKE, NOW) is None
    refused = slept("error: sleep refused: this agent may not sleep")
    assert wake_message(refused, WAKE, NOW) is None


def test_a_sleep_lost_before_it_was_recorded_is_told_too() -> None:
    message = wake_message(slept(), None, NOW)
    assert message is not None
    assert message["content"].startswith(f"{WOKE} Your sleep did not happen")


# -- the wall clock less the sleep -----------------------------------------------------------


def test_the_wall_clock_does_not_count_the_sleep() -> None:
    history = History(first_started=NOW)
    history.slept_at[1] = NOW + timedelta(seconds=10)
    history.dispatched_at[1] = NOW - timedelta(seconds=1)
    history.dispatched_at[2] = NOW + timedelta(seconds=3610)  # woke after an hour
    resumption = Resumption(2, history, Folded())
    # 10 s before the sleep and 5 s since the woken attempt's dispatch: 45 of 60 left.
    assert resumption.remaining_wall(60, NOW + timedelta(seconds=3615)) == 45
    # Not dispatched yet (no scheduler, a config file): asleep until now.
    alone = History(first_started=NOW, slept_at={1: NOW + timedelta(seconds=10)})
    assert Resumption(2, alone, Folded()).remaining_wall(60, NOW + timedelta(hours=5)) == 50
