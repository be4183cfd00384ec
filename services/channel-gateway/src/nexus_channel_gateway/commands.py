"""What a chat message asks for: a run, a flow, an approval answer, or words for a running run.

Pure parsing, no I/O: `parse("@nexus run implementer: fix the login bug", "nexus")` is
``RunCommand("implementer", "fix the login bug")``; ``flow feature: add dark mode`` is
``FlowCommand("feature", "add dark mode")``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from nexus_events.contract.subjects import TOKEN_PATTERN

from nexus_channel_gateway.codes import normalize

# Slack writes a mention as <@U123ABC>; Telegram and people write @name.
_MENTION = re.compile(r"^\s*(?:<@[A-Z0-9]+>|@[\w.-]+)[\s,:]*")
_RUN = re.compile(r"^run\s+(?P<agent>\S+?)\s*[:\s]\s*(?P<input>.*)$", re.IGNORECASE | re.DOTALL)
_FLOW = re.compile(r"^flow\s+(?P<flow>\S+?)\s*[:\s]\s*(?P<input>.*)$", re.IGNORECASE | re.DOTALL)
_ANSWER = re.compile(
    r"^(?P<verb>yes|no|approve|deny)\s+(?P<id>[A-Za-z0-9]{3,12})\s*[.!]?\s*$", re.IGNORECASE
)


@dataclass(frozen=True, slots=True)
class RunCommand:
    agent_id: str
    input: str


@dataclass(frozen=True, slots=True)
class FlowCommand:
    flow: str
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


Command = RunCommand | FlowCommand | ApprovalAnswer | Text | Invalid


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
    for pattern, kind in ((_RUN, "agent"), (_FLOW, "flow")):
        found = pattern.match(body)
        if found is not None:
            return _named(kind, found[kind].rstrip(":"), found["input"].strip())
    return Text(body)


def _named(kind: str, name: str, what: str) -> RunCommand | FlowCommand | Invalid:
    """`run <agent>: ...` or `flow <flow>: ...`, or why it is not one."""
    verb = "run" if kind == "agent" else "flow"
    if TOKEN_PATTERN.fullmatch(name) is None:
        return Invalid(
            f"`{name}` is not {'an agent' if kind == 'agent' else 'a flow'} id"
            " (letters, digits, - and _)"
        )
    if not what:
        who = name if kind == "agent" else "the flow"
        return Invalid(f"say what {who} should do: `{verb} {name}: <what to do>`")
    return RunCommand(name, what) if kind == "agent" else FlowCommand(name, what)
