"""What a chat message asks for: a run, an approval answer, or words for a running run.

Pure parsing, no I/O: `parse("@nexus run implementer: fix the login bug", "nexus")` is
``RunCommand("implementer", "fix the login bug")``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from nexus_events.subjects import TOKEN_PATTERN

from nexus_channel_gateway.codes import normalize

# Slack writes a mention as <@U123ABC>; Telegram and people write @name.
_MENTION = re.compile(r"^\s*(?:<@[A-Z0-9]+>|@[\w.-]+)[\s,:]*")
_RUN = re.compile(r"^run\s+(?P<agent>\S+?)\s*[:\s]\s*(?P<input>.*)$", re.IGNORECASE | re.DOTALL)
_ANSWER = re.compile(
    r"^(?P<verb>yes|no|approve|deny)\s+(?P<id>[A-Za-z0-9]{3,12})\s*[.!]?\s*$", re.IGNORECASE
)


@dataclass(frozen=True, slots=True)
class RunCommand:
    agent_id: str
    input: str


@dataclass(frozen=True, slots=True)
class ApprovalAnswer:
    short_id: str
    decision: str  # approve | deny


@dataclass(frozen=True, slots=True)
class Text:
    text: str


@dataclass(frozen=True, slots=True)
class Invalid:
    reason: str


Command = RunCommand | ApprovalAnswer | Text | Invalid


def strip_mention(text: str) -> str:
    return _MENTION.sub("", text, count=1).strip()


def parse(text: str) -> Command:
    body = strip_mention(text)
    answer = _ANSWER.match(body)
    if answer is not None:
        verb = answer["verb"].lower()
        return ApprovalAnswer(
            normalize(answer["id"]), "approve" if verb in ("yes", "approve") else "deny"
        )
    run = _RUN.match(body)
    if run is not None:
        agent, what = run["agent"].rstrip(":"), run["input"].strip()
        if TOKEN_PATTERN.fullmatch(agent) is None:
            return Invalid(f"`{agent}` is not an agent id (letters, digits, - and _)")
        if not what:
            return Invalid(f"say what {agent} should do: `run {agent}: <what to do>`")
        return RunCommand(agent, what)
    return Text(body)
