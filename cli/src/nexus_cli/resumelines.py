"""One readable line for each resume, sleep and context event of a run (docs/resume.md).

Bodies come from the event log as JSON: a field of the wrong type (an older or foreign
publisher) is shown as unknown instead of failing the whole view.
"""

from __future__ import annotations

from typing import Any

from nexus_events.contract.runstate import RunEvent
from nexus_events.events import Reason

# A checkpoint commit is shown as git shows an abbreviated sha.
SHORT_SHA = 7
# The scheduler's reasons for a new attempt, as people say them.
_LOSS = {
    "heartbeat_missing": "runner loss (heartbeats missing)",
    "runtime_gone": "runner loss",
}


def _int(body: dict[str, Any], key: str) -> int | None:
    value = body.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _count(body: dict[str, Any], key: str) -> int:
    value = body.get(key)
    return len(value) if isinstance(value, list) else 0


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "s")


def loss(reason: object) -> str:
    """Why an attempt ended, for a sentence: "runner loss", "runner loss (oom_killed)"."""
    if not isinstance(reason, str) or not reason:
        return "runner loss"
    return _LOSS.get(reason, f"runner loss ({reason})")


def attempt_label(attempt: object, max_attempts: object = None) -> str:
    """ "2/3" when the limit is known, else "2"."""
    if not isinstance(attempt, int):
        return "?"
    return f"{attempt}/{max_attempts}" if isinstance(max_attempts, int) else str(attempt)


def resuming_line(body: dict[str, Any]) -> str:
    attempt = attempt_label(body.get("attempt"))
    if body.get("reason") == Reason.WOKE:
        wake = body.get("wake")
        cause = wake.get("cause") if isinstance(wake, dict) else None
        text = wake.get("text") if isinstance(wake, dict) else None
        line = f"woke ({cause or '?'}): starting attempt {attempt}"
        return f"{line}: {text}" if isinstance(text, str) and text else line
    line = f"resuming after {loss(body.get('reason'))} (attempt {attempt})"
    message = body.get("message")
    return f"{line}: {message}" if isinstance(message, str) and message else line


def resumed_line(body: dict[str, Any]) -> str:
    """ "resumed after runner loss (attempt 2): 7 turns, checkpoint ab12cd3, 1 interrupted
    call" and what else the restore did."""
    turns = _int(body, "turns")
    checkpoint = body.get("checkpoint")
    parts = [
        "? turns" if turns is None else _plural(turns, "turn"),
        f"checkpoint {checkpoint[:SHORT_SHA]}"
        if isinstance(checkpoint, str) and checkpoint
        else "clean workspace",
    ]
    interrupted, rerun = _count(body, "interrupted_calls"), _count(body, "rerun_calls")
    if interrupted:
        parts.append(_plural(interrupted, "interrupted call"))
    if rerun:
        parts.append(_plural(rerun, "call") + " re-run")
    latency = _int(body, "latency_ms")
    if latency is not None:
        parts.append(f"{latency / 1000:.1f}s after the loss")
    attempt = attempt_label(body.get("attempt"))
    return f"resumed after runner loss (attempt {attempt}): " + ", ".join(parts)


def checkpointed_line(body: dict[str, Any]) -> str:
    commit = body.get("commit")
    sha = commit[:SHORT_SHA] if isinstance(commit, str) else "?"
    files, size = _int(body, "files"), _int(body, "size")
    detail = ", ".join(
        p
        for p in (
            None if files is None else _plural(files, "file"),
            None if size is None else f"{size / 1024:.1f} KiB",
        )
        if p
    )
    line = f"checkpointed after turn {body.get('turn', '?')}: {sha}"
    return f"{line} ({detail})" if detail else line


def condensed_line(body: dict[str, Any]) -> str:
    """ "condensed before turn 8 (elide): 9000 -> 3000 tokens, budget 8000 (estimate)"."""
    condensation = body.get("condensation")
    strategy = condensation.get("strategy") if isinstance(condensation, dict) else None
    before, after, budget = (_int(body, k) for k in ("tokens_before", "tokens_after", "budget"))

    def n(v: int | None) -> str:
        return "?" if v is None else str(v)

    return (
        f"condensed before turn {body.get('turn', '?')} ({strategy or '?'}):"
        f" {n(before)} -> {n(after)} tokens, budget {n(budget)} ({body.get('counter') or '?'})"
    )


def sleeping_line(body: dict[str, Any]) -> str:
    """ "sleeping until 2026-11-29T14:05:00Z: waiting for CI"."""
    line = f"sleeping until {body.get('until', '?')}"
    reason = body.get("reason")
    return f"{line}: {reason}" if isinstance(reason, str) and reason else line


def wake_requested_line(body: dict[str, Any]) -> str:
    """ "wake requested by ann: CI is green"."""
    who = body.get("requested_by")
    line = f"wake requested by {who}" if isinstance(who, str) and who else "wake requested"
    reason = body.get("reason")
    return f"{line}: {reason}" if isinstance(reason, str) and reason else line


LINES = {
    RunEvent.RESUMING: resuming_line,
    RunEvent.RESUMED: resumed_line,
    RunEvent.CHECKPOINTED: checkpointed_line,
    RunEvent.CONDENSED: condensed_line,
    RunEvent.SLEEPING: sleeping_line,
    RunEvent.WAKE_REQUESTED: wake_requested_line,
}


def describe_resume(event: str, body: dict[str, Any]) -> str | None:
    """The line of a resume or context event; None for other events."""
    line = LINES.get(event)  # type: ignore[call-overload]
    return None if line is None else line(body)
