"""Forks (docs/lab.md): a fork at turn N starts from its source's conversation and workspace
at that turn, with its input, writes them to its own transcript and goes on live; a fork
past the source's last turn, or where no checkpoint holds the workspace, is refused."""

from __future__ import annotations

from pathlib import Path

from nexus_events.events.runs import (
    Reason,
    RunCheckpointed,
    RunCompleted,
    RunFailed,
    RunTurn,
    ToolCalled,
)
from nexus_events.transport.bus import Bus
from tests.fakes.openai_server import FakeOpenAI, Reply, ToolCall

from nexus_runner.app import execute_run
from nexus_runner.config import RunnerSettings
from nexus_runner.transcript import read_entries

from .lab_sources import SCRIPT, accepting, lab_config, record
from .support import names, run_events

LIST = ToolCall("list_files", {"path": "."}, id="l1")


async def test_a_fork_at_turn_1_has_the_workspace_and_conversation_of_turn_1(
    bus: Bus, runner_bus: Bus, settings: RunnerSettings, remote: Path
) -> None:
    source = await record(runner_bus, settings, remote)
    script = [Reply(tool_calls=(LIST,)), Reply(tool_calls=(ToolCall("finish", {"summary": "f"}),))]
    async with FakeOpenAI(script) as llm:
        fork = lab_config(source, llm.base_url, mode="fork", at_turn=1, input="Now try b.")
        terminal = await execute_run(fork, accepting(settings), runner_bus)
        sent = llm.requests[0]["messages"]
    assert isinstance(terminal, RunCompleted), terminal
    assert terminal.result.summary == "f"
    workspace = settings.workspace_root / fork.run_id
    assert (workspace / "a.txt").read_text() == "one\n"  # turn 1's, not turn 2's rewrite
    assert not (workspace / "b.txt").exists()  # written at turn 2
    # The model is sent the source's turn 1 (its call and answer), then the input.
    roles = [m["role"] for m in sent]
    assert roles == ["system", "user", "assistant", "tool", "user"]
    assert sent[2]["tool_calls"][0]["id"] == "w1"
    assert sent[-1]["content"] == "Now try b."
    events = await run_events(bus, fork.run_id)
    assert [e.turn for e in events if isinstance(e, RunTurn)] == [2, 3]
    assert next(e.call_id for e in events if isinstance(e, ToolCalled)) == "l1"
    assert terminal.result.turns == 3
    assert terminal.tokens_in == 20  # only the fork's own calls
    # Its own transcript holds the whole conversation (its own resume needs it).
    entries = await read_entries(runner_bus, fork.run_id)
    assert [e.message for e in entries[:5]] == sent


async def test_a_fork_at_the_last_turn_ends_with_the_source_s_workspace(
    bus: Bus, runner_bus: Bus, settings: RunnerSettings, remote: Path
) -> None:
    source = await record(runner_bus, settings, remote)
    events = await run_events(bus, source.run_id)
    checkpoints = [e for e in events if isinstance(e, RunCheckpointed)]
    assert [c.turn for c in checkpoints] == [1, 2, 2]
    script = [Reply(tool_calls=(ToolCall("finish", {"summary": "again"}),))]
    async with FakeOpenAI(script) as llm:
        fork = lab_config(source, llm.base_url, mode="fork", at_turn=3, input="Once more.")
        terminal = await execute_run(fork, accepting(settings), runner_bus)
    assert isinstance(terminal, RunCompleted), terminal
    workspace = settings.workspace_root / fork.run_id
    assert (workspace / "a.txt").read_text() == "one, again\n"
    assert (workspace / "b.txt").read_text() == "two\n"


async def test_a_fork_past_the_last_turn_is_refused(
    bus: Bus, runner_bus: Bus, settings: RunnerSettings, remote: Path
) -> None:
    source = await record(runner_bus, settings, remote)
    async with FakeOpenAI() as llm:
        fork = lab_config(source, llm.base_url, mode="fork", at_turn=len(SCRIPT) + 1)
        terminal = await execute_run(fork, accepting(settings), runner_bus)
        assert llm.requests == []
    assert isinstance(terminal, RunFailed), terminal
    assert terminal.reason == Reason.LAB_SOURCE_UNUSABLE
    assert terminal.message == (f"run {source.run_id} has 4 turns: there is no turn 5 to fork at")
    assert names(await run_events(bus, fork.run_id)) == ["started", "failed"]


async def test_a_fork_at_the_finishing_turn_with_an_input_goes_on(
    bus: Bus, runner_bus: Bus, settings: RunnerSettings, remote: Path
) -> None:
    source = await record(runner_bus, settings, remote)
    script = [Reply(tool_calls=(ToolCall("finish", {"summary": "b checked too"}),))]
    async with FakeOpenAI(script) as llm:
        fork = lab_config(source, llm.base_url, mode="fork", at_turn=4, input="Check b too.")
        terminal = await execute_run(fork, accepting(settings), runner_bus)
        assert len(llm.requests) == 1  # not the source's finish again: the model is asked
        assert llm.requests[0]["messages"][-1] == {"role": "user", "content": "Check b too."}
    assert isinstance(terminal, RunCompleted), terminal
    assert (terminal.result.summary, terminal.result.turns) == ("b checked too", 5)
