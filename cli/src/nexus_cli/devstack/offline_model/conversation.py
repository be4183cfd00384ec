"""Which script a request follows and its reply, read from the conversation the request carries."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

from .check_scripts import CHECK_SCRIPTS
from .demo_scripts import DEMO_SCRIPTS
from .lab_scripts import LAB_SCRIPTS
from .replies import Reply, Step, Turn, finish
from .wait_scripts import WAIT_SCRIPTS

KEYWORD = re.compile(r"\[offline-model:([a-z_-]+)\]")
# The opening of examples/agents' system prompts: which example agent is asking.
ROLE = re.compile(r"^\s*You are the (planner|reviewer|tester)\b")
DEFAULT_SCRIPT = "fix"

# Every script by name; each gives a script's steps, given the conversation (its prompt may
# shape them).
SCRIPTS: dict[str, Callable[[Turn], list[Step]]] = {
    **DEMO_SCRIPTS,
    **CHECK_SCRIPTS,
    **LAB_SCRIPTS,
    **WAIT_SCRIPTS,
}


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # content parts
        return " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return ""


def script_name(body: dict[str, Any]) -> str:
    """The script a request follows: a keyword in the messages, a model name, the example
    agent's role, or the default."""
    messages = body.get("messages") or []
    for message in messages:
        found = KEYWORD.search(_text_of(message.get("content")))
        if found and found.group(1) in SCRIPTS:
            return found.group(1)
    model = str(body.get("model") or "")
    if model.startswith("offline-") and model.removeprefix("offline-") in SCRIPTS:
        return model.removeprefix("offline-")
    system: dict[str, Any] = next((m for m in messages if m.get("role") == "system"), {})
    role = ROLE.match(_text_of(system.get("content")))
    return role.group(1) if role else DEFAULT_SCRIPT


def _results_of(messages: list[dict[str, Any]]) -> tuple[tuple[str, dict[str, Any], str], ...]:
    """Each tool message with the call it answers (matched by id): (tool, arguments, text)."""
    calls: dict[str, tuple[str, dict[str, Any]]] = {}
    for message in messages:
        for call in message.get("tool_calls") or []:
            function = call.get("function") or {}
            try:
                arguments = json.loads(function.get("arguments") or "{}")
            except ValueError:
                arguments = {}
            calls[str(call.get("id"))] = (
                str(function.get("name")),
                arguments if isinstance(arguments, dict) else {},
            )
    out = []
    for message in messages:
        if message.get("role") == "tool":
            tool, arguments = calls.get(str(message.get("tool_call_id")), ("", {}))
            out.append((tool, arguments, _text_of(message.get("content"))))
    return tuple(out)


def _prompt_of(messages: list[dict[str, Any]], roles: tuple[str, ...] = ()) -> str:
    """The system prompt and the input: every message before the first assistant turn (only
    those of `roles` when given)."""
    parts = []
    for message in messages:
        if message.get("role") == "assistant":
            break
        if not roles or message.get("role") in roles:
            parts.append(_text_of(message.get("content")))
    return "\n".join(parts)


EXTRACTION_MARKER = "[nexus-memory-extraction]"  # nexus_memory.extraction.MARKER


def extraction_answer(transcript: str) -> str:
    """Memory extraction's answer: the run's result summary as one memory."""
    fields = dict(line.split(": ", 1) for line in transcript.splitlines() if ": " in line)
    try:
        summary = str(json.loads(fields.get("Result", "{}")).get("result", {}).get("summary", ""))
    except ValueError:
        summary = ""
    first = summary.strip().splitlines()[0] if summary.strip() else ""
    if not first or fields.get("Outcome") != "completed":
        return json.dumps({"memories": []})
    scope = "repo" if "Repository" in fields else "agent"
    text = f"{first} (learned by {fields.get('Agent', 'an agent')} in {fields.get('Run', 'a run')})"
    return json.dumps({"memories": [{"text": text, "kind": "fact", "scope": scope}]})


def reply_for(body: dict[str, Any]) -> Reply:
    """The scripted reply to one chat-completions request."""
    messages = body.get("messages") or []
    if messages and EXTRACTION_MARKER in _text_of(messages[0].get("content")):
        return Reply(extraction_answer(_text_of(messages[-1].get("content"))))
    turns = sum(1 for m in messages if m.get("role") == "assistant")
    tool_messages = [m for m in messages if m.get("role") == "tool"]
    last_tool = _text_of(tool_messages[-1].get("content")) if tool_messages else ""
    offered = frozenset(str((t.get("function") or {}).get("name")) for t in body.get("tools") or [])
    turn = Turn(
        turns,
        last_tool,
        offered,
        _prompt_of(messages),
        _results_of(messages),
        _prompt_of(messages, ("user",)),
        tuple(_text_of(m.get("content")) for m in messages if m.get("role") == "user"),
    )
    steps = SCRIPTS[script_name(body)](turn)
    reply = steps[turns](turn) if turns < len(steps) else finish("Nothing more to do.")
    missing = [c.name for c in reply.calls if offered and c.name not in offered]
    if missing:  # the agent was not granted what the script needs: say so and end
        return finish(f"The offline model needs tools this agent lacks: {', '.join(missing)}.")
    if not offered and reply.calls:
        return Reply(reply.text or "No tools offered; nothing to do.")
    return reply
