"""Whole runs against real NATS, a real git repo with a bare remote and the fake model."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from nexus_events.contract import subjects
from nexus_events.events.inbox import ApprovalDecision, InboxMessage
from nexus_events.events.runs import (
    ApprovalDecided,
    ApprovalRequested,
    CancelRequested,
    Reason,
    RunCancelled,
    RunCompleted,
    RunFailed,
    RunHeartbeat,
    RunTurn,
    ToolCalled,
    ToolResult,
)
from nexus_events.runtime.clock import ManualClock
from nexus_events.transport.bus import Bus
from nexus_testing import eventually
from tests.fakes.openai_server import Failure, FakeOpenAI, Reply, ToolCall

from nexus_runner.app import RunHandle, execute_run
from nexus_runner.config import RunnerSettings

from .conftest import git
from .support import log_text, make_config, names, run_events, wait_for


def tc(name: str, **args: Any) -> ToolCall:
    return ToolCall(name, args)


def finish(summary: str = "done") -> Reply:
    return Reply(tool_calls=(tc("finish", summary=summary),))


async def test_implementer_fixes_a_failing_test_and_pushes(
    bus: Bus, runner_bus: Bus, settings: RunnerSettings, remote: Path, tmp_path: Path
) -> None:
    script = [
        Reply(text="Let me look at the code first.", tool_calls=(tc("read_file", path="calc.py"),)),
        Reply(tool_calls=(tc("run_tests"),)),
        Reply(tool_calls=(tc("edit_file", path="calc.py", old="a - b", new="a + b"),)),
        Reply(tool_calls=(tc("run_tests"),)),
        Reply(tool_calls=(tc("git_commit", message="Fix add"),)),
        finish("Fixed add() to add."),
    ]
    async with FakeOpenAI(script) as llm:
        config = make_config(
            llm.base_url,
            repo={"url": str(remote)},
            permissions={"can_commit": True, "can_push": True},
        )
        terminal = await execute_run(config, settings, runner_bus)
    assert isinstance(terminal, RunCompleted), terminal
    result = terminal.result
    assert result.branch == f"nexus/{config.run_id}"
    assert result.tests_passed is True
    assert result.files_changed == ["calc.py"]
    assert result.pushed is True
    assert result.turns == 6
    assert result.commit_sha is not None
    assert result.acceptance is not None
    assert result.acceptance["passed"] is True
    assert terminal.tokens_in == 60
    assert terminal.cost_usd > 0
    # The fix is on the remote branch.
    shown = git(remote, "show", f"nexus/{config.run_id}:calc.py")
    assert "a + b" in shown
    events = await run_events(bus, config.run_id)
    # Heartbeats beat from the start, before the clone that `started` waits for: a slow
    # clone (a loaded machine) puts one first, so the run's own steps are read without them.
    seq = [n for n in names(events) if n != "heartbeat"]
    assert seq[0] == "started"
    assert seq[-1] == "completed"
    assert seq.count("turn") == 6
    results = [e for e in events if isinstance(e, ToolResult)]
    assert [r.ok for r in results if r.tool == "run_tests"] == [False, True]
    turns = [e for e in events if isinstance(e, RunTurn)]
    assert turns[0].tokens_in == 10
    assert turns[0].finish_reason == "tool_calls"
    assert "Let me look at the code first." in await log_text(bus, config.run_id)
    # The model was offered the granted tools and saw the tool output.
    offered = {t["function"]["name"] for t in llm.requests[0]["tools"]}
    assert {"read_file", "edit_file", "finish"} <= offered
    assert any("a - b" in str(m.get("content")) for m in llm.requests[1]["messages"])


async def test_reviewer_without_write_permission_cannot_write_or_push(
    bus: Bus, runner_bus: Bus, settings: RunnerSettings, remote: Path
) -> None:
    script = [
        Reply(tool_calls=(tc("write_file", path="calc.py", content="x"),)),
        Reply(tool_calls=(tc("run_shell", command="git push origin HEAD:main"),)),
        Reply(tool_calls=(tc("git_commit", message="sneaky"),)),
        Reply(
            tool_calls=(
                tc("finish", summary="Review: add() subtracts.", details={"verdict": "changes"}),
            )
        ),
    ]
    async with FakeOpenAI(script) as llm:
        config = make_config(
            llm.base_url,
            agent_id="reviewer",
            repo={"url": str(remote)},
            tools=["read_file", "list_files", "run_shell", "git_diff", "git_commit", "finish"],
        )
        settings = settings.model_copy(update={"acceptance_report_only": True})
        terminal = await execute_run(config, settings, runner_bus)
    assert isinstance(terminal, RunCompleted), terminal
    assert terminal.result.pushed is False
    assert terminal.result.commits == []
    assert terminal.result.details["verdict"] == "changes"
    assert terminal.result.acceptance is not None
    assert terminal.result.acceptance["passed"] is False
    events = await run_events(bus, config.run_id)
    called = [e for e in events if isinstance(e, ToolCalled) and e.tool != "finish"]
    assert [c.refused for c in called] == [True, True, True]
    assert "not granted" in (called[0].refusal_reason or "")
    assert "a - b" in (Path(settings.workspace_root) / config.run_id / "calc.py").read_text()
    branches = git(remote, "branch", "--list")
    assert "nexus/" not in branches
    # The refusal reached the model.
    assert "refused" in str(llm.requests[1]["messages"][-1]["content"])


async def test_failing_acceptance_fails_the_run(
    bus: Bus, runner_bus: Bus, settings: RunnerSettings, remote: Path
) -> None:
    async with FakeOpenAI([finish("nothing to do")]) as llm:
        config = make_config(llm.base_url, repo={"url": str(remote)})
        terminal = await execute_run(config, settings, runner_bus)
    assert isinstance(terminal, RunFailed)
    assert terminal.reason == Reason.ACCEPTANCE_FAILED
    assert terminal.detail["acceptance"]["passed"] is False


async def test_failing_tests_do_not_fail_a_run_that_can_only_read(
    runner_bus: Bus, settings: RunnerSettings, remote: Path
) -> None:
    # A planner (or reviewer, tester) on a repository whose tests fail: no work of its own.
    async with FakeOpenAI([finish("1. Fix add().")]) as llm:
        reads = ["read_file", "list_files", "search_files", "run_tests", "git_diff", "finish"]
        config = make_config(llm.base_url, repo={"url": str(remote)}, tools=reads)
        terminal = await execute_run(config, settings, runner_bus)
    assert isinstance(terminal, RunCompleted), terminal
    assert terminal.result.acceptance is not None
    assert terminal.result.acceptance["passed"] is False
    assert terminal.result.tests_passed is False


async def _decide(bus: Bus, run_id: str, decision: str, twice: str | None = None) -> None:
    requested = await wait_for(bus, run_id, "approval_requested")
    assert isinstance(requested, ApprovalRequested)
    await bus.publish(
        subjects.inbox(run_id),
        ApprovalDecision(approval_id=requested.approval_id, decision=decision, decided_by="ann"),  # type: ignore[arg-type]
    )
    if twice is not None:
        await bus.publish(
            subjects.inbox(run_id),
            ApprovalDecision(approval_id=requested.approval_id, decision=twice, decided_by="bob"),  # type: ignore[arg-type]
        )


async def _approval_run(
    bus: Bus, runner_bus: Bus, settings: RunnerSettings, decision: str | None
) -> tuple[list[Any], FakeOpenAI, Path]:
    script = [Reply(tool_calls=(tc("write_file", path="notes.txt", content="hello"),)), finish()]
    async with FakeOpenAI(script) as llm:
        config = make_config(llm.base_url, permissions={"approval_required_tools": ["write_file"]})
        run = asyncio.create_task(execute_run(config, settings, runner_bus))
        if decision is not None:
            await _decide(bus, config.run_id, decision, twice="deny")
        terminal = await asyncio.wait_for(run, 20)
    assert isinstance(terminal, RunCompleted), terminal
    return await run_events(bus, config.run_id), llm, settings.workspace_root / config.run_id


async def test_approval_granted_runs_the_tool_first_decision_wins(
    bus: Bus, runner_bus: Bus, settings: RunnerSettings
) -> None:
    events, _, ws = await _approval_run(bus, runner_bus, settings, "approve")
    decided = [e for e in events if isinstance(e, ApprovalDecided)]
    assert [(d.decision, d.decided_by) for d in decided] == [("approved", "ann")]
    assert (ws / "notes.txt").read_text() == "hello"


async def test_approval_denied_is_reported_to_the_model(
    bus: Bus, runner_bus: Bus, settings: RunnerSettings
) -> None:
    events, llm, ws = await _approval_run(bus, runner_bus, settings, "deny")
    decided = [e for e in events if isinstance(e, ApprovalDecided)]
    assert [d.decision for d in decided] == ["denied"]
    assert not (ws / "notes.txt").exists()
    assert "approval denied by ann" in str(llm.requests[1]["messages"][-1]["content"])


async def test_approval_expires_as_denied(
    bus: Bus, runner_bus: Bus, settings: RunnerSettings
) -> None:
    settings = settings.model_copy(update={"approval_timeout": 0.3})
    events, _, ws = await _approval_run(bus, runner_bus, settings, None)
    decided = [e for e in events if isinstance(e, ApprovalDecided)]
    assert [d.decision for d in decided] == ["expired"]
    assert not (ws / "notes.txt").exists()


async def test_destructive_shell_command_needs_approval(
    bus: Bus, runner_bus: Bus, settings: RunnerSettings
) -> None:
    script = [Reply(tool_calls=(tc("run_shell", command="rm -rf /tmp/x-nexus-none"),)), finish()]
    async with FakeOpenAI(script) as llm:
        config = make_config(llm.base_url)
        run = asyncio.create_task(execute_run(config, settings, runner_bus))
        await _decide(bus, config.run_id, "deny")
        terminal = await asyncio.wait_for(run, 20)
    assert isinstance(terminal, RunCompleted)
    requested = [
        e for e in await run_events(bus, config.run_id) if isinstance(e, ApprovalRequested)
    ]
    assert "destructive" in requested[0].why


async def test_turn_budget_exceeded(bus: Bus, runner_bus: Bus, settings: RunnerSettings) -> None:
    step = Reply(tool_calls=(tc("list_files"),))
    async with FakeOpenAI([step, step, step]) as llm:
        config = make_config(llm.base_url, budgets={"max_turns": 2})
        terminal = await execute_run(config, settings, runner_bus)
    assert isinstance(terminal, RunFailed)
    assert terminal.reason == Reason.BUDGET_EXCEEDED
    assert terminal.detail["budget"] == "max_turns"
    assert len(llm.requests) == 2


async def test_token_budget_exceeded(bus: Bus, runner_bus: Bus, settings: RunnerSettings) -> None:
    async with FakeOpenAI([Reply(text="hi", prompt_tokens=900, completion_tokens=200)]) as llm:
        config = make_config(llm.base_url, budgets={"max_tokens": 1000})
        terminal = await execute_run(config, settings, runner_bus)
    assert isinstance(terminal, RunFailed)
    assert terminal.detail["budget"] == "max_tokens"
    assert terminal.tokens_in == 900


async def test_wall_clock_budget(bus: Bus, runner_bus: Bus, settings: RunnerSettings) -> None:
    clock = ManualClock()
    async with FakeOpenAI([Reply(text="thinking...", hang=True)]) as llm:
        config = make_config(llm.base_url, budgets={"max_wall_seconds": 1})
        run = asyncio.create_task(execute_run(config, settings, runner_bus, clock=clock))
        await asyncio.wait_for(llm.hanging.wait(), 10)
        clock.advance(1)  # the run's second is spent while the model call hangs
        terminal = await asyncio.wait_for(run, 10)
    assert isinstance(terminal, RunFailed)
    assert terminal.detail["budget"] == "max_wall_seconds"


async def test_stuck_on_repeated_call(bus: Bus, runner_bus: Bus, settings: RunnerSettings) -> None:
    async with FakeOpenAI(default=Reply(tool_calls=(tc("git_status"),))) as llm:
        config = make_config(llm.base_url)
        terminal = await execute_run(config, settings, runner_bus)
    assert isinstance(terminal, RunFailed)
    assert terminal.reason == Reason.STUCK
    assert len(llm.requests) == 3


async def test_stuck_without_progress(bus: Bus, runner_bus: Bus, settings: RunnerSettings) -> None:
    async with FakeOpenAI(default=Reply(text="I am pondering.")) as llm:
        config = make_config(llm.base_url)
        terminal = await execute_run(config, settings, runner_bus)
    assert isinstance(terminal, RunFailed)
    assert terminal.reason == Reason.STUCK
    assert "without progress" in terminal.message


async def test_rate_limit_then_success(bus: Bus, runner_bus: Bus, settings: RunnerSettings) -> None:
    script = [Failure(429, retry_after=0.2), Failure(503), finish()]
    async with FakeOpenAI(script) as llm:
        config = make_config(llm.base_url)
        terminal = await execute_run(config, settings, runner_bus)
    assert isinstance(terminal, RunCompleted), terminal
    assert llm.failures_sent == 2
    assert "HTTP 429" in await log_text(bus, config.run_id, "runner")


async def test_model_unavailable_fails_the_run(
    bus: Bus, runner_bus: Bus, settings: RunnerSettings
) -> None:
    settings = settings.model_copy(update={"llm_max_attempts": 3})
    async with FakeOpenAI(default=Failure(500)) as llm:
        config = make_config(llm.base_url)
        terminal = await execute_run(config, settings, runner_bus)
    assert isinstance(terminal, RunFailed)
    assert terminal.reason == Reason.LLM_UNAVAILABLE
    assert len(llm.requests) == 3


async def test_cancel_mid_stream(bus: Bus, runner_bus: Bus, settings: RunnerSettings) -> None:
    async with FakeOpenAI([Reply(text="a long answer", chunk_size=2, hang=True)]) as llm:
        config = make_config(llm.base_url)
        run = asyncio.create_task(execute_run(config, settings, runner_bus))
        await asyncio.wait_for(llm.hanging.wait(), 10)
        await bus.publish(
            subjects.run_event(config.run_id, "cancel_requested"),
            CancelRequested(requested_by="ann"),
        )
        terminal = await asyncio.wait_for(run, 10)
    assert isinstance(terminal, RunCancelled)
    assert terminal.reason == Reason.USER_REQUESTED
    assert terminal.cancelled_by == "ann"
    assert names(await run_events(bus, config.run_id))[-1] == "cancelled"


async def test_sigterm_mid_shell_kills_the_command(
    bus: Bus, runner_bus: Bus, settings: RunnerSettings, tmp_path: Path
) -> None:
    marker = tmp_path / "survived"
    command = f"echo started; sleep 30; touch {marker}"
    async with FakeOpenAI([Reply(tool_calls=(tc("run_shell", command=command),))]) as llm:
        config = make_config(llm.base_url)
        handle = RunHandle()
        run = asyncio.create_task(execute_run(config, settings, runner_bus, handle=handle))
        called = await wait_for(bus, config.run_id, "tool_called")
        assert isinstance(called, ToolCalled)
        handle.terminate()
        terminal = await asyncio.wait_for(run, 10)
    assert isinstance(terminal, RunCancelled)
    assert terminal.reason == Reason.TERMINATED
    assert not marker.exists()


async def test_cancel_before_start_is_honoured(
    bus: Bus, runner_bus: Bus, settings: RunnerSettings
) -> None:
    async with FakeOpenAI([finish()]) as llm:
        config = make_config(llm.base_url)
        await bus.publish(subjects.run_event(config.run_id, "cancel_requested"), CancelRequested())
        terminal = await execute_run(config, settings, runner_bus)
    assert isinstance(terminal, RunCancelled)
    assert llm.requests == []


async def test_path_escape_is_refused(bus: Bus, runner_bus: Bus, settings: RunnerSettings) -> None:
    script = [Reply(tool_calls=(tc("read_file", path="../../../etc/passwd"),)), finish()]
    async with FakeOpenAI(script) as llm:
        config = make_config(llm.base_url)
        terminal = await execute_run(config, settings, runner_bus)
    assert isinstance(terminal, RunCompleted)
    called = [e for e in await run_events(bus, config.run_id) if isinstance(e, ToolCalled)]
    assert called[0].refused
    assert "root:" not in str(llm.requests[1]["messages"][-1]["content"])


async def test_inbox_message_is_injected_into_the_next_turn(
    bus: Bus, runner_bus: Bus, settings: RunnerSettings
) -> None:
    async with FakeOpenAI([Reply(text="working", hang=True), finish()]) as llm:
        config = make_config(llm.base_url)
        handle = RunHandle()
        run = asyncio.create_task(execute_run(config, settings, runner_bus, handle=handle))
        await asyncio.wait_for(llm.hanging.wait(), 10)
        await bus.publish(
            subjects.inbox(config.run_id), InboxMessage(text="also update the docs", sender="ann")
        )
        await eventually(
            lambda: handle.control is not None and handle.control.messages,
            within=5,
            what="the runner got the message",
        )
        llm.release.set()
        terminal = await asyncio.wait_for(run, 10)
    assert isinstance(terminal, RunCompleted), terminal
    contents = [str(m.get("content")) for m in llm.requests[1]["messages"]]
    assert "[message from ann] also update the docs" in contents


async def test_heartbeats_while_waiting(
    bus: Bus, runner_bus: Bus, settings: RunnerSettings
) -> None:
    clock = ManualClock()
    async with FakeOpenAI([Reply(text="slow", hang=True), finish()]) as llm:
        config = make_config(llm.base_url)
        run = asyncio.create_task(execute_run(config, settings, runner_bus, clock=clock))
        await asyncio.wait_for(llm.hanging.wait(), 10)
        clock.advance(settings.heartbeat_interval)  # a heartbeat is due while the call hangs

        async def heartbeats() -> list[RunHeartbeat]:
            return [e for e in await run_events(bus, config.run_id) if isinstance(e, RunHeartbeat)]

        # A heartbeat sent while the model call hangs says so.
        beats = await eventually(
            heartbeats, lambda seen: any(b.phase == "thinking" for b in seen), interval=0.05
        )
        llm.release.set()
        terminal = await asyncio.wait_for(run, 10)
    assert isinstance(terminal, RunCompleted)
    assert [b.seq for b in beats] == list(range(1, len(beats) + 1))
