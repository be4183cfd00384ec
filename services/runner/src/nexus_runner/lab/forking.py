"""Where a fork starts (pure): its source's conversation up to the end of a turn, and the
source's workspace checkpoint to restore at that turn."""

from __future__ import annotations

from typing import Any

from nexus_events.events.runs import RunCheckpointed

from nexus_runner.lab.recording import SourceRun, unusable
from nexus_runner.loop import UNWRITING_TOOLS
from nexus_runner.transcript import apply_entry


def fork_messages(source: SourceRun, at_turn: int) -> list[dict[str, Any]]:
    """The source's folded conversation up to the end of turn `at_turn`: its assistant
    message and the tool messages answering it. `RunStopped` when the source has no such
    turn."""
    if at_turn > len(source.calls):
        raise unusable(
            f"run {source.run_id} has {len(source.calls)} turns: there is no turn {at_turn}"
            " to fork at"
        )
    messages: list[dict[str, Any]] = []
    replies = 0
    answering: set[str] = set()
    for entry in source.entries:
        message = entry.message if entry.op == "message" else None
        if replies == at_turn and not (
            message is not None
            and message.get("role") == "tool"
            and message.get("tool_call_id") in answering
        ):
            break  # the first thing after turn at_turn's answers: not kept
        messages = apply_entry(messages, entry)
        if message is not None and message.get("role") == "assistant":
            replies += 1
            answering = {str(c.get("id")) for c in message.get("tool_calls") or []}
    return messages


def fork_checkpoint(source: SourceRun, at_turn: int) -> RunCheckpointed | None:
    """The source's latest checkpoint at or before turn `at_turn`; None when the workspace is
    the base commit's there (no call up to that turn could write). `RunStopped` when a call
    may have written and no checkpoint holds its effect."""
    taken = [c for c in source.checkpoints if c.turn <= at_turn]
    if taken:
        return taken[-1]  # stream order: the last one taken by then
    writing = [
        c
        for c in source.called
        if c.turn <= at_turn and c.tool not in UNWRITING_TOOLS and not c.refused
    ]
    if writing:
        raise unusable(f"run {source.run_id} has no checkpoint at or before turn {at_turn}")
    return None


__all__ = ["fork_checkpoint", "fork_messages"]
