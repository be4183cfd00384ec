"""The scripts of agents that wait and remember (issue 42; docs/resume.md, docs/schedules.md,
docs/channels.md): a run that sleeps and checks its work after waking, one that makes its own
schedule, lets it fire while asleep and deletes it, and a chat agent that says back what it
was told.

Like every script, each reply is a function of the request: what the woken attempt sees (the
``[woke]`` note, the tool results kept in its transcript) decides what it does next.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from .replies import Call, Reply, Step, Turn, finish

SLEEP_FILE = "notes/before-sleep.txt"
SLEEP_TEXT = "written before the sleep\n"
SLEEP_SECONDS = 5
# ``[sleep-seconds:N]`` in the prompt sleeps N seconds instead (a run to wake by hand).
_SLEEP_FOR = re.compile(r"\[sleep-seconds:(\d+)\]")
# The schedule the `schedule` script makes: its input picks `chat` for the runs it fires.
SCHEDULE_INPUT = "[offline-model:chat] check the nightly build"
SCHEDULE_INTERVAL = 60
# Long enough for the schedule to fire twice (at 60 s and 120 s) while its maker sleeps.
SCHEDULE_SLEEP_SECONDS = 130
WOKE = "[woke]"  # nexus_runner.waking.WOKE
ECHO_PREFIX = "You said"
_CREATED = re.compile(r"created schedule (\S+)")


def woke_note(turn: Turn) -> str:
    """The last ``[woke]`` message the run was given, or ""."""
    return next((s for s in reversed(turn.said) if s.startswith(WOKE)), "")


def _result_of(turn: Turn, tool: str) -> str:
    return next((text for name, _, text in reversed(turn.results) if name == tool), "")


def _sleep_steps(first: Turn) -> list[Step]:
    asked = _SLEEP_FOR.search(first.prompt)
    seconds = int(asked.group(1)) if asked else SLEEP_SECONDS
    return [
        lambda t: Reply(
            "Writing down where I am before I wait.",
            (Call("write_file", {"path": SLEEP_FILE, "content": SLEEP_TEXT}),),
        ),
        lambda t: Reply(
            "Now I wait for CI.",
            (Call("sleep", {"seconds": seconds, "reason": "waiting for CI"}),),
        ),
        lambda t: Reply("Awake; reading my note back.", (Call("read_file", {"path": SLEEP_FILE}),)),
        lambda t: finish(
            "Slept, woke and found my note.",
            read=t.last_tool,
            woke=woke_note(t),
        ),
    ]


def _schedule_steps(first: Turn) -> list[Step]:
    def delete(t: Turn) -> Reply:
        made = _CREATED.search(_result_of(t, "schedule_create"))
        if made is None:
            return finish("My schedule was not created.", created=None, deleted=False)
        return Reply(
            "It has fired while I slept; removing it.",
            (Call("schedule_delete", {"schedule_id": made.group(1)}),),
        )

    def done(t: Turn) -> Reply:
        made = _CREATED.search(_result_of(t, "schedule_create"))
        deleted = _result_of(t, "schedule_delete")
        return finish(
            "Made a schedule, let it fire, deleted it.",
            created=made.group(1) if made else None,
            deleted=deleted.startswith("deleted schedule"),
            listed=_result_of(t, "schedule_list"),
            woke=woke_note(t),
        )

    return [
        lambda t: Reply(
            "I will check the nightly build every minute.",
            (
                Call(
                    "schedule_create",
                    {"interval_seconds": SCHEDULE_INTERVAL, "input": SCHEDULE_INPUT},
                ),
            ),
        ),
        lambda t: Reply(
            "Waiting while it fires.",
            (
                Call(
                    "sleep",
                    {"seconds": SCHEDULE_SLEEP_SECONDS, "reason": "letting my schedule fire"},
                ),
            ),
        ),
        lambda t: Reply("Awake; what do I have?", (Call("schedule_list", {}),)),
        delete,
        done,
    ]


def echo_answer(turn: Turn) -> Reply:
    """Finish with every user message the request carries, in order (a conversation's earlier
    messages, then the new one)."""
    said = [s for s in turn.said if not s.startswith(WOKE)]
    return finish(f"{ECHO_PREFIX} ({len(said)}): " + " | ".join(said), said=said)


def _echo_steps(first: Turn) -> list[Step]:
    # Whatever the turn: a conversation's earlier answers are assistant messages too.
    return [echo_answer] * (first.index + 1)


WAIT_SCRIPTS: dict[str, Callable[[Turn], list[Step]]] = {
    "sleep": _sleep_steps,
    "schedule": _schedule_steps,
    "echo": _echo_steps,
}
