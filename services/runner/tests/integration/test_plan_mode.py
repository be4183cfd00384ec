"""Plan mode, whole runs on real NATS with the fake model: read tools only until the plan is
approved through the approvals; a plan not approved ends the run with the plan as its result."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from nexus_events.contract import subjects
from nexus_events.events.inbox import ApprovalDecision
from nexus_events.events.runs import (
    ApprovalDecided,
    ApprovalRequested,
    Reason,
    RunCompleted,
    ToolCalled,
    ToolResult,
)
from nexus_events.transport.bus import Bus
from tests.fakes.openai_server import FakeOpenAI, Reply, ToolCall

from nexus_runner.app import execute_run
from nexus_runner.config import RunnerSettings

from .conftest import git
from .support import make_config, run_events, wait_for
from .test_mcp import FAKE_SERVER, server

PLAN = "1. Read calc.py.\n2. Change `a - b` to `a + b` in add().\n3. Run the tests."
READS = {"read_file", "list_files", "search_files", "git_status", "git_diff"}


def tc(name: str, **args: Any) -> ToolCall:
    return ToolCall(name, args)


def offered(request: dict[str, Any]) -> set[str]:
    return {t["function"]["name"] for t in request.get("tools", [])}


async def _decide(bus: Bus, run_id: str, decision: str, comment: str | None = None) -> None:
    requested = await wait_for(bus, run_id, "approval_requested")
    assert isinstance(requested, ApprovalRequested)
    await bus.publish(
        subjects.inbox(run_id),
        ApprovalDecision(
            approval_id=requested.approval_id,
            decision=decision,  # type: ignore[arg-type]
            decided_by="ann",
            comment=comment,
        ),
    )


async def _plan_run(
    bus: Bus,
    runner_bus: Bus,
    settings: RunnerSettings,
    script: list[Reply],
    decision: str | None,
    **overrides: Any,
) -> tuple[RunCompleted, list[Any], FakeOpenAI, Path]:
    async with FakeOpenAI(script) as llm:
        config = make_config(llm.base_url, plan_mode=True, **overrides)
        run = asyncio.create_task(execute_run(config, settings, runner_bus))
        if decision is not None:
            await _decide(bus, config.run_id, decision, comment="not now")
        terminal = await asyncio.wait_for(run, 30)
    assert isinstance(terminal, RunCompleted), terminal
    return (
        terminal,
        await run_events(bus, config.run_id),
        llm,
        settings.workspace_root / config.run_id,
    )


async def test_approved_plan_offers_the_write_tools_from_the_next_turn(
    bus: Bus, runner_bus: Bus, settings: RunnerSettings
) -> None:
    script = [
        Reply(tool_calls=(tc("list_files"),)),
        Reply(tool_calls=(tc("exit_plan_mode", plan=PLAN),)),
        Reply(tool_calls=(tc("write_file", path="notes.txt", content="planned"),)),
        Reply(tool_calls=(tc("finish", summary="did the plan"),)),
    ]
    terminal, events, llm, ws = await _plan_run(bus, runner_bus, settings, script, "approve")
    assert terminal.reason == Reason.SUCCEEDED
    assert terminal.result.summary == "did the plan"
    assert (ws / "notes.txt").read_text() == "planned"
    # In plan mode: the granted read tools and exit_plan_mode, nothing that writes or runs.
    assert offered(llm.requests[0]) == READS | {"exit_plan_mode"}
    assert offered(llm.requests[1]) == READS | {"exit_plan_mode"}
    # After the approval: the whole granted set, and no exit_plan_mode any more.
    after = offered(llm.requests[2])
    assert {"write_file", "edit_file", "run_shell", "run_tests", "finish"} <= after
    assert "exit_plan_mode" not in after
    # The plan went through the ordinary approvals, the plan as the summary.
    requested = [e for e in events if isinstance(e, ApprovalRequested)]
    assert [(r.tool, r.summary) for r in requested] == [("exit_plan_mode", PLAN)]
    decided = [e for e in events if isinstance(e, ApprovalDecided)]
    assert [(d.decision, d.decided_by) for d in decided] == [("approved", "ann")]
    # The model was told it is out of plan mode, and which tools it now has.
    told = str(llm.requests[2]["messages"][-1]["content"])
    assert "Plan approved by ann" in told
    assert "write_file" in told
    results = {e.tool: e for e in events if isinstance(e, ToolResult)}
    assert results["exit_plan_mode"].ok
    assert results["write_file"].ok


async def test_denied_plan_ends_the_run_with_the_plan_as_result(
    bus: Bus, runner_bus: Bus, settings: RunnerSettings, remote: Path
) -> None:
    script = [
        Reply(tool_calls=(tc("read_file", path="calc.py"),)),
        Reply(tool_calls=(tc("exit_plan_mode", plan=PLAN),)),
    ]
    terminal, events, llm, ws = await _plan_run(
        bus,
        runner_bus,
        settings,
        script,
        "deny",
        repo={"url": str(remote)},
        permissions={"can_commit": True, "can_push": True},
    )
    assert terminal.reason == Reason.PLAN_NOT_APPROVED
    assert terminal.result.summary == PLAN
    assert terminal.result.details["plan"]["approved"] is False
    assert terminal.result.details["plan"]["decision"] == "denied"
    assert terminal.result.details["plan"]["decided_by"] == "ann"
    assert terminal.result.details["plan"]["comment"] == "not now"
    # Nothing written, committed or pushed (acceptance would have failed this repo's test).
    assert terminal.result.pushed is False
    assert terminal.result.commits == []
    assert git(ws, "status", "--porcelain") == ""
    assert "nexus/" not in git(remote, "branch", "--list")
    # The model made two calls; the run did not ask it again after the denial.
    assert len(llm.requests) == 2
    results = [e for e in events if isinstance(e, ToolResult) and e.tool == "exit_plan_mode"]
    assert [r.ok for r in results] == [False]


async def test_expired_plan_ends_the_run_like_a_denial(
    bus: Bus, runner_bus: Bus, settings: RunnerSettings
) -> None:
    settings = settings.model_copy(update={"approval_timeout": 0.3})
    script = [Reply(tool_calls=(tc("exit_plan_mode", plan=PLAN),))]
    terminal, events, _, _ = await _plan_run(bus, runner_bus, settings, script, None)
    assert terminal.reason == Reason.PLAN_NOT_APPROVED
    assert terminal.result.summary == PLAN
    assert terminal.result.details["plan"]["decision"] == "expired"
    assert [e.decision for e in events if isinstance(e, ApprovalDecided)] == ["expired"]


async def test_write_tools_in_plan_mode_are_refused_and_point_to_exit_plan_mode(
    bus: Bus, runner_bus: Bus, settings: RunnerSettings
) -> None:
    script = [
        Reply(tool_calls=(tc("write_file", path="x.txt", content="no"),)),
        Reply(tool_calls=(tc("run_shell", command="touch y.txt"),)),
        Reply(tool_calls=(tc("finish", summary="skip the plan"),)),
        # Submitted with a write in the same turn: that write was chosen before the
        # approval, so it is still refused; the tools come from the next turn.
        Reply(
            tool_calls=(
                tc("exit_plan_mode", plan=PLAN),
                tc("write_file", path="z.txt", content="too early"),
            )
        ),
        Reply(tool_calls=(tc("write_file", path="z.txt", content="now"),)),
        Reply(tool_calls=(tc("finish", summary="done"),)),
    ]
    terminal, events, llm, ws = await _plan_run(bus, runner_bus, settings, script, "approve")
    assert terminal.reason == Reason.SUCCEEDED
    calls = [e for e in events if isinstance(e, ToolCalled)]
    refused = [(c.tool, c.refused) for c in calls]
    assert refused == [
        ("write_file", True),
        ("run_shell", True),
        ("finish", True),
        ("exit_plan_mode", False),
        ("write_file", True),
        ("write_file", False),
        ("finish", False),
    ]
    for call in calls[:3]:
        assert call.refusal_reason is not None
        assert "exit_plan_mode" in call.refusal_reason
    told = str(llm.requests[1]["messages"][-1]["content"])
    assert told.startswith("refused: plan mode")
    assert "exit_plan_mode" in told
    assert not (ws / "x.txt").exists()
    assert not (ws / "y.txt").exists()
    assert (ws / "z.txt").read_text() == "now"


async def test_mcp_tools_annotated_read_only_are_offered_in_plan_mode(
    bus: Bus, runner_bus: Bus, settings: RunnerSettings
) -> None:
    script = [
        Reply(tool_calls=(tc("mcp_fake__lookup", word="plan"),)),
        Reply(tool_calls=(tc("mcp_fake__echo", text="not yet"),)),
        Reply(tool_calls=(tc("exit_plan_mode", plan=PLAN),)),
    ]
    mcp = server(tools=["echo", "lookup"], env={})
    # The server's script is not the command (python is): the operator's allowlist shows it.
    settings = settings.model_copy(update={"tool_sandbox_readable": [FAKE_SERVER.parent]})
    terminal, events, llm, _ = await _plan_run(
        bus, runner_bus, settings, script, "deny", mcp_servers=[mcp]
    )
    assert terminal.reason == Reason.PLAN_NOT_APPROVED
    first = offered(llm.requests[0])
    assert "mcp_fake__lookup" in first
    assert "mcp_fake__echo" not in first
    calls = [(c.tool, c.refused) for c in events if isinstance(c, ToolCalled)]
    assert calls == [
        ("mcp_fake__lookup", False),
        ("mcp_fake__echo", True),
        ("exit_plan_mode", False),
    ]
    results = {e.tool: e for e in events if isinstance(e, ToolResult)}
    assert results["mcp_fake__lookup"].ok
    assert "plan: a word" in results["mcp_fake__lookup"].output
