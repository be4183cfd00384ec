"""The auto-approve dial: whether a call that passed the hard refusals runs or asks.

Destructive calls ask whatever the dial. Under `curated`, reads and writes inside the
workspace run; shell commands that leave the workspace or reach the network ask. Under
`off` every call but `finish` asks; under
`all_but_destructive` only destructive ones do.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from nexus_runner.guard.shell import Classification, classify

Mode = Literal["off", "curated", "all_but_destructive"]
# The run can always end itself (plan mode's exit_plan_mode never reaches the dial: the loop
# asks for the plan's approval itself).
_ALWAYS_RUN = frozenset(["finish"])


@dataclass(frozen=True)
class Verdict:
    action: Literal["run", "ask"]
    reason: str = ""
    command_class: str | None = None


def judge_builtin(tool: str, command: str | None, mode: Mode, workspace: Path | None) -> Verdict:
    """The dial's verdict on a built-in tool call (`command`: run_shell's command).

    Built-in tools other than the shell cannot act outside the workspace (their paths are
    refused before this), the run's memory scopes or its allowed delegates: `curated` runs
    them."""
    if tool in _ALWAYS_RUN:
        return Verdict("run")
    found: Classification | None = None
    if command is not None:
        found = classify(command, workspace)
        cls = found.command_class
        if cls == "destructive":
            return Verdict("ask", f"destructive command: {found.reason}", cls)
        if mode == "curated" and cls in ("network", "outside_workspace"):
            return Verdict("ask", f"{cls.replace('_', ' ')} command: {found.reason}", cls)
    cls_name = found.command_class if found else None
    if mode == "off":
        return Verdict("ask", "auto_approve is off: every call asks", cls_name)
    return Verdict("run", "", cls_name)


def judge_mcp(
    *,
    listed: bool,
    read_only_hint: bool | None,
    destructive_hint: bool | None,
    mode: Mode,
) -> Verdict:
    """MCP tools: `destructiveHint` always asks; otherwise one listed in the server's
    `auto_approve` or annotated `readOnlyHint` runs (unless the dial is off); under
    `all_but_destructive` one annotated `destructiveHint: false` runs too. Unannotated tools
    count as destructive, as the MCP specification's defaults say."""
    if destructive_hint is True and not read_only_hint:
        return Verdict("ask", "the MCP server marks this tool destructive")
    if mode == "off":
        return Verdict("ask", "auto_approve is off: every call asks")
    if listed or read_only_hint:
        return Verdict("run", "read-only (MCP annotation)" if read_only_hint else "")
    if mode == "all_but_destructive" and destructive_hint is False:
        return Verdict("run")
    return Verdict("ask", "MCP tool is not marked read-only")
