"""The guard pipeline's order: plan mode, parsing, the grant, the hard refusals, the dial, the
approval gate, the rules, then the scripts; the first refusal ends the judgement."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from nexus_events.events.specs import Hooks, Permissions, ToolGrant

from nexus_runner.git import Author, Git
from nexus_runner.guard.verdict import Outcome, Verdict
from nexus_runner.tools import ToolContext, ToolRegistry
from nexus_runner.workspace import Workspace

TOOLS = ["read_file", "write_file", "run_shell", "git_commit", "finish"]
ALLOW_ALL = {"before_tool_call": [{"name": "anything", "tool": "*", "decision": "allow"}]}


def registry(root: Path, hooks: dict[str, Any] | None = None, **perms: Any) -> ToolRegistry:
    ws = Workspace(root)
    ctx = ToolContext(
        workspace=ws, git=Git(ws.root, Author("a", "a@x")), shell_timeout=10, output_cap=1000
    )
    return ToolRegistry(
        [ToolGrant(name=t) for t in TOOLS],
        Permissions.model_validate({"auto_approve": "curated", **perms}),
        ctx,
        hooks=Hooks.model_validate(hooks or {}),
    )


def script(name: str, source: str) -> dict[str, Any]:
    return {"name": name, "on": "before_tool_call", "tool": "*", "source": source}


def test_plan_mode_judges_before_parsing_and_the_grant(tmp_path: Path) -> None:
    reg = registry(tmp_path, hooks=ALLOW_ALL)
    # Not granted, arguments not even JSON: plan mode's refusal is what the model reads.
    refused = reg.decide("delegate", "{not json", "c1", plan_mode=True)
    assert refused.action is Outcome.REFUSE
    assert refused.reason.startswith("plan mode: 'delegate' is not available")
    assert refused.raw == {"arguments": "{not json"}
    assert refused.guard is None  # no dial, no hook saw it
    plan = reg.decide("exit_plan_mode", json.dumps({"plan": "1. read 2. write"}), plan_mode=True)
    assert (plan.action, plan.reason, plan.guard) == (Outcome.ASK_APPROVAL, "a plan", None)
    empty = reg.decide("exit_plan_mode", "{}", plan_mode=True)
    assert empty.action is Outcome.INVALID
    # Outside plan mode the same calls meet the other steps.
    assert reg.decide("delegate", "{not json").action is Outcome.INVALID
    assert "not granted" in reg.decide("delegate", "{}").reason


def test_hard_refusals_come_in_order_and_before_any_hook(tmp_path: Path) -> None:
    reg = registry(tmp_path, hooks=ALLOW_ALL, can_commit=False)
    # A path escape wins over the push in the same call.
    both = reg.decide("run_shell", json.dumps({"command": "git push", "cwd": "../x"}))
    assert both.action is Outcome.REFUSE
    assert "push" not in both.reason
    push = reg.decide("run_shell", json.dumps({"command": "git push origin main"}))
    assert push.reason == "pushing is done by the runner when the run finishes, not from the shell"
    assert push.guard is None  # refused before the hooks: an allow cannot lift it
    commit = reg.decide("git_commit", json.dumps({"message": "m"}))
    assert (commit.action, commit.reason) == (Outcome.REFUSE, "this run is not permitted to commit")


def test_the_approval_gate_holds_against_a_hook_allow(tmp_path: Path) -> None:
    reg = registry(tmp_path, hooks=ALLOW_ALL, approval_required_tools=["read_file"])
    gated = reg.decide("read_file", json.dumps({"path": "a.txt"}))
    assert gated.action is Outcome.ASK_APPROVAL
    assert gated.guard is not None
    assert (gated.guard.decision, gated.guard.rule) == ("ask", "anything")
    assert reg.decide("write_file", json.dumps({"path": "a", "content": "x"})).action == "run"


def test_scripts_judge_after_the_rules_and_only_a_stricter_answer_counts(tmp_path: Path) -> None:
    deny = script("deny", "function hook(c) { return {decision: 'deny', reason: 'no'} }")
    allow = script("allow", "function hook(c) { return {decision: 'allow'} }")
    ask_rule = {"name": "ask", "tool": "*", "decision": "ask", "reason": "rule asks"}
    deny_rule = {"name": "deny", "tool": "*", "decision": "deny", "reason": "rule denies"}
    read = json.dumps({"path": "a.txt"})

    stricter = registry(tmp_path, {"before_tool_call": [ask_rule], "scripts": [deny]})
    judged = stricter.decide("read_file", read)
    assert (judged.action, judged.reason) == (Outcome.REFUSE, "denied by policy: no")
    assert judged.guard is not None
    assert judged.guard.rule == "script deny"

    laxer = registry(tmp_path, {"before_tool_call": [ask_rule], "scripts": [allow]})
    judged = laxer.decide("read_file", read)
    assert (judged.action, judged.reason) == (Outcome.ASK_APPROVAL, "rule asks")

    # A rule's deny ends it: the scripts do not run (a spinning one would fail the call with
    # its own reason).
    spin = {**script("spin", "function hook(c) { for (;;) {} }"), "limits": {"wall_seconds": 0.2}}
    denied = registry(tmp_path, {"before_tool_call": [deny_rule], "scripts": [spin]})
    judged = denied.decide("read_file", read)
    assert judged.reason == "denied by policy: rule denies"


def test_one_strictness_order_for_every_verdict() -> None:
    run, redact = Verdict(Outcome.RUN), Verdict(Outcome.REDACT)
    ask, refuse = Verdict(Outcome.ASK_APPROVAL), Verdict(Outcome.REFUSE)
    assert run.stricter_than(None)
    assert ask.stricter_than(run)
    assert refuse.stricter_than(ask)
    assert not ask.stricter_than(refuse)
    assert not run.stricter_than(redact)  # redacting never stops a call
    assert not refuse.stricter_than(Verdict(Outcome.REFUSE))  # the first of equals wins
