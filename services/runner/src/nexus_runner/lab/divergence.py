"""A replay's first divergence (pure): what differs first between a model request and the
recorded one, classified as the contract's `DivergenceKind`."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from nexus_events.events.lab import DIVERGENCE_EXCERPT, RunDiverged
from nexus_events.events.lab_specs import DivergenceKind, OnDivergence
from nexus_events.events.runs import RunConfig

from nexus_runner.lab.normalising import Normaliser
from nexus_runner.prompt import without_skills


@dataclass(frozen=True)
class Divergence:
    """What differed: its kind, the message index if a message, one line, both sides."""

    kind: DivergenceKind
    detail: str
    index: int | None = None
    recorded: str = ""
    actual: str = ""

    def event(self, turn: int, action: OnDivergence) -> RunDiverged:
        return RunDiverged(
            turn=turn,
            kind=self.kind,
            index=self.index,
            detail=self.detail,
            recorded=self.recorded[:DIVERGENCE_EXCERPT],
            actual=self.actual[:DIVERGENCE_EXCERPT],
            action=action,
        )


def _dump(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True, default=str)


def config_divergence(recorded: RunConfig | None, config: RunConfig) -> Divergence | None:
    """MODEL or TOOLS when the replay's model or offered tools differ from its source's
    (compared once, at turn 1); None when equal or the source's config is unknown."""
    if recorded is None:
        return None
    was, now = recorded.model, config.model
    if (was.name, was.temperature) != (now.name, now.temperature):
        return Divergence(
            DivergenceKind.MODEL,
            f"model {was.name} (temperature {was.temperature}) is now {now.name}"
            f" (temperature {now.temperature})",
            recorded=f"{was.name} t={was.temperature}",
            actual=f"{now.name} t={now.temperature}",
        )
    for label, before, after in (
        ("tool grants", recorded.tools, config.tools),
        ("sandbox tools", recorded.sandbox_tools, config.sandbox_tools),
        ("MCP servers", recorded.mcp_servers, config.mcp_servers),
    ):
        old = [g.model_dump(mode="json") for g in before]
        new = [g.model_dump(mode="json") for g in after]
        if old != new:
            return Divergence(
                DivergenceKind.TOOLS, f"the {label} offered differ", recorded=_dump(old),
                actual=_dump(new),
            )  # fmt: skip
    return None


def _kind(recorded: dict[str, Any] | None, actual: dict[str, Any] | None) -> DivergenceKind:
    either = actual if actual is not None else recorded
    role = (either or {}).get("role")
    if role == "system" and recorded is not None and actual is not None:
        before, after = str(recorded.get("content", "")), str(actual.get("content", ""))
        if without_skills(before) == without_skills(after):
            return DivergenceKind.SKILLS
        return DivergenceKind.SYSTEM_PROMPT
    if role == "system":
        return DivergenceKind.SYSTEM_PROMPT
    if role == "tool":
        return DivergenceKind.TOOL_RESULT
    return DivergenceKind.MESSAGE


def _sides(was: dict[str, Any] | None, now: dict[str, Any] | None) -> tuple[str, str]:
    """Each side's excerpt: the contents when they differ, else the whole messages."""
    if was is not None and now is not None and was.get("content") == now.get("content"):
        return _dump(was), _dump(now)
    return (
        _dump((was or {}).get("content") or "") if was else "",
        _dump((now or {}).get("content") or "") if now else "",
    )


def message_divergence(
    recorded: list[dict[str, Any]], actual: list[dict[str, Any]], normaliser: Normaliser
) -> Divergence | None:
    """The first message (after normalising both) that differs, or a message one side has
    and the other does not; None when the requests are the same."""
    for index in range(max(len(recorded), len(actual))):
        was = normaliser.value(recorded[index]) if index < len(recorded) else None
        now = normaliser.value(actual[index]) if index < len(actual) else None
        if was == now:
            continue
        kind = _kind(was, now)
        role = (now or was or {}).get("role", "?")
        if was is None or now is None:
            side = "the replay has" if was is None else "the recording has"
            detail = f"{side} one more {role} message at index {index}"
        else:
            detail = f"the {role} message at index {index} differs"
        return Divergence(kind, detail, index, *_sides(was, now))
    return None


def recording_ended(turn: int, recorded_turns: int) -> Divergence:
    return Divergence(
        DivergenceKind.RECORDING_ENDED,
        f"the replay asks turn {turn}; the recording ends at turn {recorded_turns}",
    )


__all__ = ["Divergence", "config_divergence", "message_divergence", "recording_ended"]
