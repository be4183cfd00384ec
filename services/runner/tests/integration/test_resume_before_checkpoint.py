"""A run killed before its first checkpoint resumes (issue 36, defect 1): attempt 2 finds
the dead attempt's workspace (its clone, what its tools wrote) at the same path, and goes on
from a clean clone instead of failing "workspace ... is not empty". For an implementer killed
in its first shell command, and for a read-only agent, which never checkpoints at all."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from nexus_events.events.runs import RunCheckpointed, RunCompleted, RunResumed, ToolCalled
from nexus_events.transport.bus import Bus
from nexus_testing import eventually
from tests.fakes.openai_server import FakeOpenAI, Reply, ToolCall

from nexus_runner.app import RunHandle, execute_run
from nexus_runner.config import RunnerSettings

from .support import make_config, run_events
from .test_resume import attempt, kill

FINISH = Reply(tool_calls=(ToolCall("finish", {"summary": "done"}),))


async def test_an_implementer_killed_in_its_first_tool_call_resumes_from_a_clean_clone(
    bus: Bus, runner_bus: Bus, settings: RunnerSettings, remote: Path
) -> None:
    read = ToolCall("read_file", {"path": "calc.py"}, id="r1")
    shell = ToolCall("run_shell", {"command": "echo half > half.txt && sleep 30"}, id="s1")
    async with FakeOpenAI([Reply(tool_calls=(read,)), Reply(tool_calls=(shell,))]) as llm1:
        config = make_config(llm1.base_url, repo={"url": str(remote)})
        workspace = settings.workspace_root / config.run_id
        handle = RunHandle()
        run1 = asyncio.create_task(execute_run(config, settings, runner_bus, handle=handle))
        await eventually((workspace / "half.txt").exists, within=15)
        await kill(run1, handle)  # in its second tool call, before any checkpoint
    assert (workspace / "calc.py").exists()  # the dead attempt's clone is still there

    async with FakeOpenAI([FINISH]) as llm2:
        done = settings.model_copy(update={"acceptance_command": "true"})
        terminal = await execute_run(attempt(config, 2, llm2.base_url), done, runner_bus)
    assert isinstance(terminal, RunCompleted), terminal
    assert not (workspace / "half.txt").exists()  # never checkpointed: a clean clone
    assert (workspace / "calc.py").exists()
    events = await run_events(bus, config.run_id)
    assert not [e for e in events if isinstance(e, RunCheckpointed)]
    (resumed,) = [e for e in events if isinstance(e, RunResumed)]
    assert (resumed.attempt, resumed.checkpoint, resumed.interrupted_calls) == (2, None, ["s1"])
    # The read that had its result is not asked for again: the model is told, not re-run.
    calls = [e.call_id for e in events if isinstance(e, ToolCalled)]
    assert calls.count("r1") == 1
    assert (
        llm2.requests[0]["messages"][: len(llm1.requests[1]["messages"])]
        == (llm1.requests[1]["messages"])
    )


async def test_a_read_only_agent_killed_after_its_reads_resumes(
    bus: Bus, runner_bus: Bus, settings: RunnerSettings, remote: Path
) -> None:
    reads = [
        Reply(tool_calls=(ToolCall("list_files", {"path": "."}, id="l1"),)),
        Reply(tool_calls=(ToolCall("read_file", {"path": "calc.py"}, id="r1"),)),
        Reply(tool_calls=(ToolCall("read_file", {"path": "test_calc.py"}, id="r2"),)),
        Reply(text="thinking", hang=True),
    ]
    async with FakeOpenAI(reads) as llm1:
        config = make_config(
            llm1.base_url,
            agent_id="reviewer",
            repo={"url": str(remote)},
            tools=["read_file", "list_files", "search_files", "finish"],
        )
        handle = RunHandle()
        run1 = asyncio.create_task(execute_run(config, settings, runner_bus, handle=handle))
        await asyncio.wait_for(llm1.hanging.wait(), 30)
        await kill(run1, handle)  # after three reads: a reviewer never checkpoints
    started = time.monotonic()
    async with FakeOpenAI([FINISH]) as llm2:
        done = settings.model_copy(update={"acceptance_command": "true"})
        terminal = await execute_run(attempt(config, 2, llm2.base_url), done, runner_bus)
    assert isinstance(terminal, RunCompleted), terminal
    print(f"attempt 2 cleared, cloned and finished in {time.monotonic() - started:.2f}s")
    assert len(llm2.requests) == 1
    events = await run_events(bus, config.run_id)
    (resumed,) = [e for e in events if isinstance(e, RunResumed)]
    assert (resumed.attempt, resumed.turns, resumed.checkpoint) == (2, 3, None)
    calls = [e.call_id for e in events if isinstance(e, ToolCalled) and e.tool != "finish"]
    assert sorted(calls) == ["l1", "r1", "r2"]  # no read made twice
