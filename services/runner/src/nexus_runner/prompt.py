"""The first messages of a run: system prompt with skills and memory, then the task."""

from __future__ import annotations

import re
from typing import Any

from nexus_events.events.inbox import InboxMessage
from nexus_events.events.runs import RunConfig

from nexus_runner.plan import PLAN_NOTE, READ_SKILL

# The headings of the system message's parts after the agent's own prompt; a replay tells a
# skills-only difference from a prompt difference by them (`without_skills`).
SKILL_HEADING = "## Skill: "
ON_DEMAND_HEADING = "## Skills on demand"
MEMORY_HEADING = "## Relevant memory"
RULES_HEADING = "## Working rules"


def _on_demand_part(config: RunConfig) -> str | None:
    listed = [s for s in config.skills if s.on_demand]
    if not listed:
        return None
    # No version: a changed skill shows where the model reads it, not in every request.
    lines = "\n".join(f"- {s.name}: {s.description.strip()}" for s in listed)
    return (
        f"{ON_DEMAND_HEADING}\nRead one with the `{READ_SKILL}` tool when the task needs it.\n"
        f"{lines}"
    )


def initial_messages(config: RunConfig, workspace_note: str) -> list[dict[str, Any]]:
    parts = [config.system_prompt.strip()]
    for skill in config.skills:
        if not skill.on_demand:
            parts.append(f"{SKILL_HEADING}{skill.name} (v{skill.version})\n{skill.content.strip()}")
    if (on_demand := _on_demand_part(config)) is not None:
        parts.append(on_demand)
    if config.memory.items:
        lines = "\n".join(f"- {m.text}" for m in config.memory.items)
        parts.append(f"{MEMORY_HEADING}\n{lines}")
    parts.append(
        f"{RULES_HEADING}\n"
        f"{workspace_note}\nPaths are relative to the workspace root. "
        "When the work is done, call the `finish` tool with a short summary."
    )
    if config.plan_mode:
        parts.append(PLAN_NOTE)
    task = config.input or "Work on the task you were given."
    # A chat conversation so far (docs/channels.md): the transcript begins with it, so the
    # agent answers the new message in context; a long one is condensed like any transcript.
    earlier = [{"role": m.role, "content": m.text} for m in config.conversation]
    return [
        {"role": "system", "content": "\n\n".join(parts)},
        *earlier,
        {"role": "user", "content": task},
    ]


# From the first skill part (loaded or listed) to the part after the skills.
_SKILLS = re.compile(
    rf"\n\n(?:{re.escape(SKILL_HEADING)}|{re.escape(ON_DEMAND_HEADING)}).*?"
    rf"(?=\n\n(?:{re.escape(MEMORY_HEADING)}|{re.escape(RULES_HEADING)})\n|\Z)",
    re.DOTALL,
)


def without_skills(system: str) -> str:
    """A system message built by `initial_messages` with its skills' parts taken out."""
    return _SKILLS.sub("", system, count=1)


def inbox_message(message: InboxMessage) -> dict[str, Any]:
    who = message.sender or ("a peer agent" if message.sender_kind == "agent" else "a person")
    return {"role": "user", "content": f"[message from {who}] {message.text}"}
