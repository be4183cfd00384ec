"""The first messages of a run: system prompt with skills and memory, then the task."""

from __future__ import annotations

from typing import Any

from nexus_events.events.inbox import InboxMessage
from nexus_events.events.runs import RunConfig

from nexus_runner.plan import PLAN_NOTE


def initial_messages(config: RunConfig, workspace_note: str) -> list[dict[str, Any]]:
    parts = [config.system_prompt.strip()]
    for skill in config.skills:
        parts.append(f"## Skill: {skill.name} (v{skill.version})\n{skill.content.strip()}")
    if config.memory.items:
        lines = "\n".join(f"- {m.text}" for m in config.memory.items)
        parts.append(f"## Relevant memory\n{lines}")
    parts.append(
        "## Working rules\n"
        f"{workspace_note}\nPaths are relative to the workspace root. "
        "When the work is done, call the `finish` tool with a short summary."
    )
    if config.plan_mode:
        parts.append(PLAN_NOTE)
    task = config.input or "Work on the task you were given."
    return [
        {"role": "system", "content": "\n\n".join(parts)},
        {"role": "user", "content": task},
    ]


def inbox_message(message: InboxMessage) -> dict[str, Any]:
    who = message.sender or ("a peer agent" if message.sender_kind == "agent" else "a person")
    return {"role": "user", "content": f"[message from {who}] {message.text}"}
