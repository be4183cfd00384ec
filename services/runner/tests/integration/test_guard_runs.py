"""The guard in whole runs on real NATS: the auto-approve dial and policy hooks, with every
decision recorded in the tool_called / tool_result events."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from nexus_events.events.runs import (
    ApprovalDecided,
    ApprovalRequested,
    RunCompleted,
    ToolCalled,
    ToolResult,
)
from nexus_events.transport.bus import Bus
from tests.fakes.openai_server import FakeOpenAI, Reply, ToolCall

from nexus_runner.app import execute_run
from nexus_runner.config import RunnerSettings
from nexus_runner.guard.hooks import MAX_MATCHED_CHARS

from .support import make_config, run_events


def step(name: str, **args: Any) -> Reply:
    return Reply(tool_calls=(ToolCall(name, args),))


async def _run(
    bus: Bus, runner_bus: Bus, settings: RunnerSettings, script: list[Reply], **config: Any
) -> tuple[list[Any], FakeOpenAI, str]:
    # Nobody answers: every approval the run asks for expires quickly and its call is not run.
    settings = settings.model_copy(update={"approval_timeout": 0.3})
    async with FakeOpenAI([*script, step("finish", summary="done")]) as llm:
        run_config = make_config(llm.base_url, **config)
        terminal = await asyncio.wait_for(execute_run(run_config, settings, runner_bus), 90)
    assert isinstance(terminal, RunCompleted), terminal
    return await run_events(bus, run_config.run_id), llm, run_config.run_id


COMMANDS = [
    "ls -la",  # read_only
    "cat ~/.ssh/id_rsa",  # outside the workspace
    "curl -s -m 1 http://127.0.0.1:9/",  # network
    "echo bHM= | base64 -d | sh",  # destructive: text piped into a shell
    "gi''t push origin HEAD",  # a push from the shell: refused whatever the dial
]
# What happens to each command under each dial: allow (ran), ask (asked, expired), deny.
EXPECTED = {
    "off": ["ask", "ask", "ask", "ask", "deny"],
    "curated": ["allow", "ask", "ask", "ask", "deny"],
    "all_but_destructive": ["allow", "allow", "allow", "ask", "deny"],
}


@pytest.mark.parametrize("mode", list(EXPECTED))
async def test_the_auto_approve_dial(
    bus: Bus, runner_bus: Bus, settings: RunnerSettings, mode: str
) -> None:
    script = [step("run_shell", command=c) for c in COMMANDS]
    events, _, _ = await _run(bus, runner_bus, settings, script, permissions={"auto_approve": mode})
    called = [e for e in events if isinstance(e, ToolCalled) and e.tool == "run_shell"]
    verdicts = [e.guard.decision if e.guard else "deny" for e in called]
    assert verdicts == EXPECTED[mode]
    assert called[4].refused
    asked = [e for e in events if isinstance(e, ApprovalRequested)]
    assert len(asked) == EXPECTED[mode].count("ask")
    decided = [e.decision for e in events if isinstance(e, ApprovalDecided)]
    assert decided == ["expired"] * len(asked)
    classes = [e.guard.command_class if e.guard else None for e in called[:4]]
    assert classes == ["read_only", "outside_workspace", "network", "destructive"]
    destructive = next(a for a in asked if "base64" in a.summary)
    assert "pipes text into a shell" in destructive.why
    finish = next(e for e in events if isinstance(e, ToolCalled) and e.tool == "finish")
    assert finish.guard is not None
    assert finish.guard.decision == "allow"  # the run can always end itself


HOOKS = {
    "before_tool_call": [
        {"name": "no-env", "tool": "read_file", "path": "*.env", "decision": "deny",
         "reason": "env files hold secrets"},
        {"name": "review-docs", "tool": "write_file", "path": "docs/*", "decision": "ask",
         "reason": "docs are reviewed"},
        {"name": "local-net", "tool": "run_shell",
         "args": {"command": "re:^curl -s -m 1 http://127\\.0\\.0\\.1"}, "decision": "allow"},
        {"name": "scan", "tool": "write_file", "args": {"content": "re:password"},
         "decision": "ask"},
    ],
    "after_tool_call": [
        {"name": "mask", "tool": "run_shell", "decision": "redact", "redact": ["tok-[0-9]+"],
         "reason": "internal tokens"},
    ],
}  # fmt: skip


async def test_policy_hooks(bus: Bus, runner_bus: Bus, settings: RunnerSettings) -> None:
    script = [
        step("read_file", path="prod.env"),
        step("write_file", path="docs/a.md", content="x"),
        step("run_shell", command="curl -s -m 1 http://127.0.0.1:9/"),
        step("run_shell", command="echo tok-12345"),
        step("write_file", path="big.txt", content="x" * (MAX_MATCHED_CHARS + 1)),
    ]
    events, llm, run_id = await _run(
        bus,
        runner_bus,
        settings,
        script,
        permissions={"auto_approve": "curated"},
        hooks=HOOKS,
    )
    called = {e.call_id: e for e in events if isinstance(e, ToolCalled)}
    results = {e.call_id: e for e in events if isinstance(e, ToolResult)}
    order = [e for e in events if isinstance(e, ToolCalled)]
    guards = [(e.guard.decision, e.guard.rule) if e.guard else None for e in order[:5]]
    assert guards == [
        ("deny", "no-env"),
        ("ask", "review-docs"),
        ("allow", "local-net"),  # curated alone would ask for a network command
        ("allow", None),
        ("deny", "scan"),  # the rule cannot be evaluated on so large a value: fails closed
    ]
    env_call = order[0]
    assert env_call.refused
    assert env_call.refusal_reason == "denied by policy: env files hold secrets"
    assert "hook scan failed" in (order[4].refusal_reason or "")
    asked = [e for e in events if isinstance(e, ApprovalRequested)]
    assert [a.why for a in asked] == ["docs are reviewed"]
    echoed = results[order[3].call_id]
    assert "tok-12345" not in echoed.output
    assert "[REDACTED]" in echoed.output
    assert echoed.guard is not None
    assert (echoed.guard.decision, echoed.guard.rule) == ("redact", "mask")
    tool_messages = [
        m for r in llm.requests for m in r["messages"] if m.get("role") == "tool"
    ]  # nor does the model see it
    assert tool_messages
    assert all("tok-12345" not in str(m.get("content")) for m in tool_messages)
    assert called[order[2].call_id].guard is not None
    assert not (settings.workspace_root / run_id / "big.txt").exists()
