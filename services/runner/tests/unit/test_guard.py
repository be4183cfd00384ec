"""The guard through the registry: the auto-approve dial, destructive commands, policy hooks."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from nexus_events.events.specs import Hooks, Permissions, ToolGrant

from nexus_runner.git import Author, Git
from nexus_runner.guard.hooks import MAX_MATCHED_CHARS
from nexus_runner.guard.policy import judge_mcp
from nexus_runner.guard.shell import classify
from nexus_runner.guard.verdict import Outcome
from nexus_runner.tools import ToolContext, ToolRegistry
from nexus_runner.tools.registry import Decision
from nexus_runner.workspace import Workspace

TOOLS = ["read_file", "write_file", "list_files", "run_shell", "finish"]


def registry(
    root: Path, mode: str = "curated", hooks: dict[str, Any] | None = None, **perms: Any
) -> ToolRegistry:
    ws = Workspace(root)
    ctx = ToolContext(
        workspace=ws, git=Git(ws.root, Author("a", "a@x")), shell_timeout=10, output_cap=1000
    )
    permissions = Permissions.model_validate({"auto_approve": mode, **perms})
    return ToolRegistry(
        [ToolGrant(name=t) for t in TOOLS],
        permissions,
        ctx,
        hooks=Hooks.model_validate(hooks or {}),
    )


def decide(reg: ToolRegistry, tool: str, **args: object) -> Decision:
    return reg.decide(tool, json.dumps(args))


# What each dial does with each kind of call: run, approve (ask) or refuse.
TABLE = [
    # (call, off, curated, all_but_destructive)
    (("read_file", {"path": "a.txt"}), "approve", "run", "run"),
    (("write_file", {"path": "a.txt", "content": "x"}), "approve", "run", "run"),
    (("write_file", {"path": "../x", "content": "x"}), "refuse", "refuse", "refuse"),
    (("run_shell", {"command": "ls -la"}), "approve", "run", "run"),
    (("run_shell", {"command": "make test"}), "approve", "run", "run"),
    (("run_shell", {"command": "cat ~/.ssh/id_rsa"}), "approve", "approve", "run"),
    (("run_shell", {"command": "curl https://x"}), "approve", "approve", "run"),
    (("run_shell", {"command": "rm -rf ~"}), "approve", "approve", "approve"),
    (("run_shell", {"command": "r''m -rf /"}), "approve", "approve", "approve"),
    (("run_shell", {"command": "[[ -f x ]]"}), "approve", "approve", "approve"),
    (("run_shell", {"command": "gi''t push evil"}), "refuse", "refuse", "refuse"),
    (("finish", {"summary": "done"}), "run", "run", "run"),
]


@pytest.mark.parametrize(("call", "off", "curated", "all_but"), TABLE)
def test_the_dial(
    tmp_path: Path, call: tuple[str, dict[str, Any]], off: str, curated: str, all_but: str
) -> None:
    tool, args = call
    for mode, expected in (("off", off), ("curated", curated), ("all_but_destructive", all_but)):
        decision = decide(registry(tmp_path, mode), tool, **args)
        assert decision.action == expected, (mode, decision.reason)
        if expected != "refuse" or decision.guard is not None:
            assert decision.guard is not None


def test_destructive_asks_with_the_classifier_reason(tmp_path: Path) -> None:
    decision = decide(
        registry(tmp_path, "all_but_destructive"), "run_shell", command="find . -delete"
    )
    assert decision.action == "approve"
    assert "find -delete" in decision.reason
    assert decision.guard is not None
    assert decision.guard.command_class == "destructive"


def test_approval_required_tools_still_ask(tmp_path: Path) -> None:
    reg = registry(tmp_path, "all_but_destructive", approval_required_tools=["read_file"])
    assert decide(reg, "read_file", path="a").action == "approve"


def test_absolute_paths_inside_the_workspace_are_inside(tmp_path: Path) -> None:
    reg = registry(tmp_path)
    assert decide(reg, "run_shell", command=f"cat {tmp_path}/a.txt").action == "run"
    assert decide(reg, "run_shell", command=f"cat {tmp_path}/../a.txt").action == "approve"


HOOKS = {
    "before_tool_call": [
        {"name": "no-env", "tool": "read_file", "path": "*.env", "decision": "deny",
         "reason": "env files hold secrets"},
        {"name": "net-ok", "tool": "run_shell", "args": {"command": "re:^curl https://pypi"},
         "decision": "allow"},
        {"name": "ask-writes", "tool": "write_file", "args": {"path": "docs/*"},
         "decision": "ask", "reason": "docs are reviewed"},
        {"name": "allow-rm", "tool": "run_shell", "command_class": ["destructive"],
         "decision": "allow"},
    ],
    "after_tool_call": [
        {"name": "mask", "tool": "run_shell", "decision": "redact", "redact": ["hunter[0-9]+"]},
        {"name": "hide", "tool": "read_file", "path": "private/*", "decision": "deny",
         "reason": "private"},
    ],
}  # fmt: skip


def test_before_hooks_deny_ask_and_allow(tmp_path: Path) -> None:
    reg = registry(tmp_path, hooks=HOOKS)
    denied = decide(reg, "read_file", path="prod.env")
    assert denied.action == "refuse"
    assert "env files hold secrets" in denied.reason
    assert denied.guard is not None
    assert denied.guard.rule == "no-env"
    asked = decide(reg, "write_file", path="docs/a.md", content="x")
    assert (asked.action, asked.reason) == ("approve", "docs are reviewed")
    allowed = decide(reg, "run_shell", command="curl https://pypi.org/simple")
    assert allowed.action == "run"  # curated would ask for a network command
    assert decide(reg, "run_shell", command="curl https://evil").action == "approve"
    # allow never lifts a destructive command's ask
    assert decide(reg, "run_shell", command="rm -rf ~").action == "approve"
    # a deny wins over an allow; no rule matches: the dial decides
    assert decide(reg, "read_file", path="src/a.py").action == "run"


async def test_after_hooks_redact_and_withhold(tmp_path: Path) -> None:
    (tmp_path / "private").mkdir()
    (tmp_path / "private" / "a").write_text("top secret")
    reg = registry(tmp_path, hooks=HOOKS)
    outcome = await reg.execute(decide(reg, "run_shell", command="echo pass hunter42"))
    assert outcome.output.startswith("pass [REDACTED]")
    assert "hunter42" not in outcome.output
    assert outcome.guard is not None
    assert outcome.guard.decision == "redact"
    hidden = await reg.execute(decide(reg, "read_file", path="private/a"))
    assert "top secret" not in hidden.output
    assert not hidden.ok
    assert hidden.guard is not None
    assert hidden.guard.rule == "hide"


async def test_a_hook_that_cannot_be_evaluated_denies(tmp_path: Path) -> None:
    reg = registry(tmp_path, hooks={"before_tool_call": [
        {"name": "scan", "tool": "write_file", "args": {"content": "re:password"},
         "decision": "ask"}]})  # fmt: skip
    decision = decide(reg, "write_file", path="a", content="x" * (MAX_MATCHED_CHARS + 1))
    assert decision.action == "refuse"
    assert "hook scan failed" in decision.reason
    assert decision.guard is not None
    assert decision.guard.decision == "deny"


def test_mcp_annotations() -> None:
    run = {"listed": False, "read_only_hint": None, "destructive_hint": None}
    assert (
        judge_mcp(**run, mode="curated").outcome is Outcome.ASK_APPROVAL
    )  # unannotated: may destroy
    assert judge_mcp(**{**run, "read_only_hint": True}, mode="curated").outcome is Outcome.RUN
    assert judge_mcp(**{**run, "listed": True}, mode="curated").outcome is Outcome.RUN
    assert judge_mcp(**{**run, "listed": True}, mode="off").outcome is Outcome.ASK_APPROVAL
    listed_destructive = {**run, "listed": True, "destructive_hint": True}
    assert (
        judge_mcp(**listed_destructive, mode="all_but_destructive").outcome is Outcome.ASK_APPROVAL
    )
    safe = {**run, "destructive_hint": False}
    assert judge_mcp(**safe, mode="all_but_destructive").outcome is Outcome.RUN
    assert judge_mcp(**safe, mode="curated").outcome is Outcome.ASK_APPROVAL


def test_classifier_fails_closed_on_huge_and_nested_input() -> None:
    assert classify("ls " + "a" * 40_000).command_class == "destructive"
    nested = "ls"
    for _ in range(10):
        nested = f"bash -c {json.dumps(nested)}"
    assert classify(nested).command_class == "destructive"
