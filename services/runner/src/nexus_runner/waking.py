"""What the model is told when its run goes on after a `sleep` (docs/resume.md, Sleep).

The woken attempt (its config's `wake`, set by the scheduler) adds one user message before its
next model call: when it slept until, why, and what woke it. The message is in the transcript,
so an attempt resumed after that one finds it there and does not add it again: the note is
due only while no ``[woke]`` message follows the conversation's last accepted sleep.

An attempt resumed after a runner loss that came between the sleep's answer and its
`sleeping` event (so the run never slept, and `wake` is not set) tells the model that too,
rather than let it believe it slept.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from nexus_events.events.runs import RunWake, WakeCause

from nexus_runner.tools.sleep import ACCEPTED, SLEEP, stamp

WOKE = "[woke]"

_CAUSES = {
    WakeCause.TIMER: "the timer (the wake time came)",
    WakeCause.SIGNAL: "a wake request",
    WakeCause.MESSAGE: "a message",
}


def _last_sleep(messages: list[dict[str, Any]]) -> int | None:
    """Index of the answer to the conversation's last accepted `sleep` call, else None."""
    sleep_calls: set[str] = set()
    found: int | None = None
    for i, message in enumerate(messages):
        role = message.get("role")
        if role == "assistant":
            for call in message.get("tool_calls") or []:
                if (call.get("function") or {}).get("name") == SLEEP:
                    sleep_calls.add(str(call.get("id", "")))
        elif (
            role == "tool"
            and message.get("tool_call_id") in sleep_calls
            and str(message.get("content", "")).startswith(ACCEPTED)
        ):
            found = i
    return found


def wake_due(messages: list[dict[str, Any]]) -> bool:
    """Whether the conversation slept and has not been told it woke."""
    last = _last_sleep(messages)
    if last is None:
        return False
    return not any(
        m.get("role") == "user" and str(m.get("content", "")).startswith(WOKE)
        for m in messages[last + 1 :]
    )


def wake_note(wake: RunWake | None, now: datetime) -> str:
    """The user message of the woken attempt (`wake` None: the sleep never happened)."""
    if wake is None:
        return (
            f"{WOKE} Your sleep did not happen: the runner was lost before the sleep was"
            f" recorded, and the run went on at once. It is now {stamp(now)}."
        )
    cause = _CAUSES.get(wake.cause, str(wake.cause))
    if wake.requested_by and wake.cause is not WakeCause.TIMER:
        cause = f"{cause} from {wake.requested_by}"
    said = f": {wake.text}" if wake.text else ""
    why = f" ({wake.sleep_reason})" if wake.sleep_reason else ""
    return (
        f"{WOKE} You slept until {stamp(wake.slept_until)}{why}; woken by {cause}{said}."
        f" It is now {stamp(now)}."
    )


def wake_message(
    messages: list[dict[str, Any]], wake: RunWake | None, now: datetime
) -> dict[str, Any] | None:
    """The message to add before the next model call, or None when none is due."""
    if not wake_due(messages):
        return None
    return {"role": "user", "content": wake_note(wake, now)}
