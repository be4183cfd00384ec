"""The auto-approve dial: whether a call that passed the hard refusals runs or asks.

Destructive calls ask whatever the dial. Under `curated`, reads and writes inside the
workspace run; shell commands that leave the workspace or reach the network ask. Under
`off` every call but `finish` and `sleep` asks; under
`all_but_destructive` only destructive ones do.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from nexus_runner.guard.shell import Classification, classify
from nexus_runner.guard.verdict import Outcome, Verdict

Mode = Literal["off", "curated", "all_but_destructive"]
# The run can always end itself (plan mode's exit_plan_mode never reaches the dial: the loop
# asks for the plan's approval itself), and sleep: it acts on nothing, and the agent's
# resume.max_sleep_seconds bounds it (approval_required_tools and hooks can still gate it).
_ALWAYS_RUN = frozenset(["finish", "sleep"])

_RUN, _ASK = Outcome.RUN, Outcome.ASK_APPROVAL


def judge_builtin(tool: str, command: str | None, mode: Mode, workspace: Path | None) -> Verdict:
    """The dial's verdict on a built-in tool call (`command`: run_shell's command).

    Built-in tools other than the shell cannot act outside the workspace (their paths are
    refused before this), the run's memory scopes or its allowed delegates: `curated` runs
    them."""
    if tool in _ALWAYS_RUN:
        return Verdict(_RUN)
    found: Classification | None = None
    if command is not None:
        found = classify(command, workspace)
        cls = found.command_class
        if cls == "destructive":
            return Verdict(_ASK, f"destructive command: {found.reason}", command_class=cls)
        if mode == "curated" and cls in ("network", "outside_workspace"):
            return Verdict(
                _ASK, f"{cls.replace('_', ' ')} command: {found.reason}", command_class=cls
            )
    cls_name = found.command_class if found else None
    if mode == "off":
        return Verdict(_ASK, "auto_approve is off: every call asks", command_class=cls_name)
    return Verdict(_RUN, command_class=cls_name)


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
        return Verdict(_ASK, "the MCP server marks this tool destructive")
    if mode == "off":
        return Verdict(_ASK, "auto_approve is off: every call asks")
    if listed or read_only_hint:
        return Verdict(_RUN, "read-only (MCP annotation)" if read_only_hint else "")
    if mode == "all_but_destructive" and destructive_hint is False:
        return Verdict(_RUN)
    return Verdict(_ASK, "MCP tool is not marked read-only")


def judge_sandboxed(tool: str, capabilities: list[str], mode: Mode) -> Verdict:
    """Sandboxed tools: every call asks under `off`; under `curated` those that reach beyond
    the workspace and the run's state (http, events) ask; their tokens bound the rest."""
    reaches = [t for t in capabilities if t.split(":", 1)[0] in ("http", "events")]
    if mode == "off":
        return Verdict(_ASK, "auto_approve is off: every call asks")
    if mode == "curated" and reaches:
        return Verdict(
            _ASK, f"sandboxed tool {tool} reaches beyond the workspace: {', '.join(reaches)}"
        )
    return Verdict(_RUN)
