"""What a script is made of: the turn the model sees, the reply it gives, its steps."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Call:
    """One tool call of a scripted reply."""

    name: str
    arguments: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Reply:
    """One scripted assistant message: some text, then tool calls."""

    text: str = ""
    calls: tuple[Call, ...] = ()


@dataclass(frozen=True)
class Turn:
    """What the model sees of the conversation so far."""

    index: int  # assistant turns already taken
    last_tool: str  # content of the last tool message ("" if none)
    tools: frozenset[str]  # the tools offered in this request
    # The system prompt and the run's input (the messages before the first assistant turn).
    prompt: str = ""
    # Every answered tool call so far, in order: (tool, arguments, what the tool said).
    results: tuple[tuple[str, dict[str, Any], str], ...] = ()
    # The run's input: the user messages before the first assistant turn.
    task: str = ""
    # Every user message so far, in order (a conversation's, notes such as ``[woke]``).
    said: tuple[str, ...] = ()


Step = Callable[[Turn], Reply]


def finish(summary: str, **details: Any) -> Reply:
    """The closing reply: `finish` with a summary and the script's details."""
    return Reply(
        "Done; reporting the result.", (Call("finish", {"summary": summary, "details": details}),)
    )
