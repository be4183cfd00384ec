"""Pure validation of catalog documents: agent and flow YAML/JSON, skill markdown with front
matter.

Operators keep these files in git; whoever publishes a catalog event from one (the CLI, a
GitOps job) validates it here first. Every problem is reported field by field
(`DocumentInvalid.errors`) so one run of ``nexus agents apply`` shows all of them at once.
"""

from __future__ import annotations

import re
from typing import Any

import yaml
from pydantic import ValidationError

from nexus_events.errors import DocumentInvalid, FieldError
from nexus_events.events import AgentDefinition, FlowDefinition, SkillDefinition

WHOLE = "(document)"
# Front matter keys that are SkillDefinition fields; any other key goes to `metadata`.
_SKILL_FIELDS = ("name", "version", "description", "hooks", "sandbox_tools", "egress")
# A flow's graph checks (nexus_events.contract.flowgraph) name the step in the message itself.
_STEP_MESSAGE = re.compile(r"\A(step '[^']*'|steps): (.*)\Z", re.DOTALL)
_VALUE_ERROR = "Value error, "
_FRONT_MATTER = re.compile(r"\A---[ \t]*\r?\n(.*?)\r?\n---[ \t]*(?:\r?\n|\Z)(.*)\Z", re.DOTALL)


def _errors(exc: ValidationError) -> list[FieldError]:
    out = []
    for err in exc.errors(include_url=False):
        loc = ".".join(str(p) for p in err["loc"]) or WHOLE
        out.append(FieldError(loc, err["msg"]))
    return out


def _load_mapping(kind: str, text: str) -> dict[str, Any]:
    """YAML is a superset of JSON, so one loader reads both."""
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise DocumentInvalid(
            kind, [FieldError(WHOLE, f"not valid YAML{where}: {problem}")]
        ) from None
    if not isinstance(data, dict):
        got = "nothing" if data is None else type(data).__name__
        raise DocumentInvalid(kind, [FieldError(WHOLE, f"must be a mapping, got {got}")])
    return {str(k): v for k, v in data.items()}


def parse_agent(text: str) -> AgentDefinition:
    """Validate an agent definition (YAML or JSON); raise `DocumentInvalid` listing every error."""
    return agent_from_mapping(_load_mapping("agent", text))


def agent_from_mapping(data: dict[str, Any]) -> AgentDefinition:
    try:
        return AgentDefinition.model_validate(data)
    except ValidationError as exc:
        raise DocumentInvalid("agent", _errors(exc)) from None


def parse_flow(text: str) -> FlowDefinition:
    """Validate a flow definition (YAML or JSON); raise `DocumentInvalid` listing every error,
    each located by step id (``step 'review'`` / ``next[0].when``) rather than by list index."""
    return flow_from_mapping(_load_mapping("flow", text))


def flow_from_mapping(data: dict[str, Any]) -> FlowDefinition:
    try:
        return FlowDefinition.model_validate(data)
    except ValidationError as exc:
        raise DocumentInvalid("flow", _flow_errors(exc, data)) from None


def _flow_errors(exc: ValidationError, data: dict[str, Any]) -> list[FieldError]:
    steps = data.get("steps")
    out = []
    for err in exc.errors(include_url=False):
        msg = err["msg"].removeprefix(_VALUE_ERROR)
        loc = list(err["loc"])
        if not loc:
            match = _STEP_MESSAGE.match(msg)
            out.append(FieldError(match[1], match[2]) if match else FieldError(WHOLE, msg))
            continue
        if loc[0] == "steps" and len(loc) >= 2 and isinstance(loc[1], int):
            index = loc[1]
            raw = steps[index] if isinstance(steps, list) and index < len(steps) else None
            step_id = raw.get("id") if isinstance(raw, dict) else None
            where = f"step {step_id!r}" if isinstance(step_id, str) else f"steps[{index}]"
            rest = loc[3:] if len(loc) > 2 else []  # loc[2] is the step kind (the union tag)
            if err["type"].startswith("union_tag"):
                rest = ["kind"]
            field = _dotted(rest)
            out.append(FieldError(f"{where}: {field}" if field else where, msg))
            continue
        out.append(FieldError(_dotted(loc), msg))
    return out


def _dotted(loc: list[Any]) -> str:
    """``['next', 0, 'when']`` -> ``next[0].when``."""
    text = ""
    for part in loc:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text


def parse_skill(text: str, *, name: str | None = None) -> SkillDefinition:
    """Validate a skill: markdown opening with a ``---`` YAML front matter block.

    Front matter holds ``name`` (or pass `name`, e.g. from the file name), ``version`` and an
    optional ``description``; other keys are kept as ``metadata``. The rest is the content.
    """
    match = _FRONT_MATTER.match(text)
    if match is None:
        raise DocumentInvalid(
            "skill", [FieldError(WHOLE, "must open with a '---' front matter block")]
        )
    front = _load_mapping("skill", match.group(1))
    content = match.group(2).strip("\n")
    fields: dict[str, Any] = {k: front.pop(k) for k in _SKILL_FIELDS if k in front}
    if name is not None:
        fields.setdefault("name", name)
    if isinstance(fields.get("version"), int | float):
        fields["version"] = str(fields["version"])  # `version: 2` is the common spelling
    errors: list[FieldError] = []
    if not content.strip():
        errors.append(FieldError("content", "the markdown body is empty"))
    try:
        skill = SkillDefinition.model_validate({**fields, "content": content, "metadata": front})
    except ValidationError as exc:
        errors = _errors(exc) + errors
        raise DocumentInvalid("skill", errors) from None
    if errors:
        raise DocumentInvalid("skill", errors)
    return skill


def render_skill(skill: SkillDefinition) -> str:
    """The markdown document of `skill` (front matter + content); `parse_skill` reads it back."""
    front: dict[str, Any] = {"name": skill.name, "version": skill.version}
    if skill.description:
        front["description"] = skill.description
    if skill.hooks.before_tool_call or skill.hooks.after_tool_call or skill.hooks.scripts:
        front["hooks"] = skill.hooks.model_dump(exclude_defaults=True)
    if skill.sandbox_tools:
        front["sandbox_tools"] = [t.model_dump(exclude_defaults=True) for t in skill.sandbox_tools]
    if skill.egress:
        front["egress"] = [g.model_dump(exclude_none=True) for g in skill.egress]
    head = yaml.safe_dump({**front, **skill.metadata}, sort_keys=False).strip()
    return f"---\n{head}\n---\n{skill.content}\n"
