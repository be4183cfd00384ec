"""A run survives its runner (issue 24): checkpoints, restore failures, a superseded runner,
and a run whose runners are killed twice going on byte for byte."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import pytest
from nexus_events.contract import run_access, subjects
from nexus_events.events.inbox import InboxMessage
from nexus_events.events.runs import (
    Reason,
    RunCheckpointed,
    RunCompleted,
    RunConfig,
    RunFailed,
    RunResumed,
    RunResuming,
    RunStarted,
    RunTurn,
    TerminalEvent,
    ToolCalled,
)
from nexus_events.events.transcripts import TranscriptEntry
from nexus_events.runtime.clock import ManualClock
from nexus_events.transport.bus import Bus
from nexus_testing import eventually
from tests.fakes.openai_server import FakeOpenAI, Reply, ToolCall

from nexus_runner.app import RunHandle, execute_run
from nexus_runner.checkpoint import Checkpointer
from nexus_runner.config import RunnerSettings
from nexus_runner.git import Author, Git
from nexus_runner.publisher import RunPublisher
from nexus_runner.transcript import ResumeFailedError, read_entries

from .conftest import git
from .support import make_config, run_events


def fresh(settings: RunnerSettings, tmp_path: Path, name: str) -> RunnerSettings:
    return settings.model_copy(update={"workspace_root": tmp_path / name})


def attempt(config: RunConfig, number: int, base_url: str) -> RunConfig:
    model = config.model.model_copy(update={"base_url": base_url})
    return config.model_copy(update={"attempt": number, "model": model})


async def kill(run: asyncio.Task[TerminalEvent], handle: RunHandle) -> None:
    """Stop an attempt as kill -9 would: no terminal event, nothing more published."""
    run.cancel()
    with pytest.raises(asyncio.CancelledError):
        await run
    assert handle.task is not None
    handle.task.cancel()
    await asyncio.gather(handle.task, return_exceptions=True)


async def say(bus: Bus, run_id: str, text: str) -> None:
    await bus.publish(subjects.inbox(run_id), InboxMessage(text=text, sender="ann"))


# -- checkpoints ---------------------------------------------------------------------------


def repo(path: Path) -> str:
    path.mkdir()
    git(path, "init", "-q", "-b", "main")
    (path / "a.txt").write_text("a\n")
    (path / "b.txt").write_text("b\n")
    (path / ".gitignore").write_text(".env\n")
    git(path, "add", "-A")
    git(path, "commit", "-q", "-m", "base")
    return git(path, "rev-parse", "HEAD").strip()


async def test_checkpoint_restores_files_deletions_and_the_agents_commits(
    bus: Bus, runner_bus: Bus, tmp_path: Path
) -> None:
    run_id = f"run-ck{time.time_ns() % 10**9}"
    work = tmp_path / "work"
    base = repo(work)
    author = Author("Nexus Agent", "agent@nexus.local")
    pub = RunPublisher(runner_bus, run_id, 1)
    ck = Checkpointer(Git(work, author), runner_bus.js, pub, base_sha=base)
    await ck.start()
    assert await ck.after_call(1) is None  # nothing changed: no checkpoint
    (work / "a.txt").write_text("a2\n")
    git(work, "commit", "-qam", "agent commit")
    agent_commit = git(work, "rev-parse", "HEAD").strip()
    (work / "c.txt").write_text("new\n")
    (work / "b.txt").unlink()
    (work / ".env").write_text("TOKEN=secret\n")  # ignored: never in a checkpoint
    first = await ck.after_call(2)
    assert first is not None
    assert first.files == 3
    assert first.object == f"{run_id}/1-1"
    (work / "c.txt").write_text("newer\n")
    second = await ck.after_call(3)
    assert second is not None
    assert second.object == f"{run_id}/1-2"
    # Each checkpoint's chunks are on a subject of the run's own (what its credential may
    # write and read: nexus_events.contract.run_access), and nothing else went to the stream.
    info = await runner_bus.js.stream_info(run_access.CHECKPOINTS_STREAM, subjects_filter=">")
    assert set(info.state.subjects or {}) == {
        run_access.checkpoint_chunks(run_id, 1, n) for n in (1, 2)
    }
    ck.close()

    clone = tmp_path / "clone"
    git(tmp_path, "clone", "-q", str(work / ".git"), str(clone))
    git(clone, "reset", "-q", "--hard", base)
    restorer = Checkpointer(
        Git(clone, author), runner_bus.js, RunPublisher(runner_bus, run_id, 2), base_sha=base
    )
    await restorer.restore(second)
    assert git(clone, "rev-parse", "HEAD").strip() == agent_commit
    assert (clone / "a.txt").read_text() == "a2\n"
    assert (clone / "c.txt").read_text() == "newer\n"
    assert not (clone / "b.txt").exists()
    assert not (clone / ".env").exists()
    assert sorted(git(clone, "status", "--porcelain").splitlines()) == [" D b.txt", "?? c.txt"]
    stored = [e for e in await run_events(bus, run_id) if isinstance(e, RunCheckpointed)]
    assert [e.commit for e in stored] == [first.commit, second.commit]

    corrupt = second.model_copy(update={"digest": "0" * 64})
    with pytest.raises(ResumeFailedError, match="corrupt"):
        await restorer.restore(corrupt)
    with pytest.raises(ResumeFailedError, match="cannot be read"):
        await restorer.restore(second.model_copy(update={"object": f"{run_id}/9-9"}))
    restorer.close()


# -- restore failures ----------------------------------------------------------------------


async def test_a_corrupt_transcript_fails_the_attempt_before_any_model_call(
    bus: Bus, runner_bus: Bus, settings: RunnerSettings
) -> None:
    async with FakeOpenAI([Reply(text="never")]) as llm:
        config = make_config(llm.base_url, attempt=2)
        turn = RunTurn(turn=1, model="m", tokens_in=1, tokens_out=1, cost_usd=0, duration_ms=1)
        await bus.publish(subjects.run_event(config.run_id, "turn"), turn)
        await bus.js.publish(subjects.run_transcript(config.run_id), b"{not json")
        terminal = await execute_run(config, settings, runner_bus)
        assert llm.requests == []
    assert isinstance(terminal, RunFailed)
    assert terminal.reason == Reason.RESUME_FAILED
    assert "NEXUS_TRANSCRIPTS" in terminal.message


async def test_a_missing_checkpoint_fails_the_attempt(
    bus: Bus, runner_bus: Bus, settings: RunnerSettings
) -> None:
    async with FakeOpenAI([Reply(text="never")]) as llm:
        config = make_config(llm.base_url, attempt=2)
        for i, text in enumerate(["system", "task"]):
            entry = TranscriptEntry(
                attempt=1, index=i, op="message", message={"role": "user", "content": text}
            )
            await bus.publish(subjects.run_transcript(config.run_id), entry)
        gone = RunCheckpointed(
            turn=1, commit="0" * 40, object=f"{config.run_id}/1-1", digest="0" * 64, size=3
        )
        await bus.publish(subjects.run_event(config.run_id, "checkpointed"), gone)
        terminal = await execute_run(config, settings, runner_bus)
        assert llm.requests == []
    assert isinstance(terminal, RunFailed)
    assert terminal.reason == Reason.RESUME_FAILED
    assert "cannot be read" in terminal.message


# -- a superseded runner -------------------------------------------------------------------


async def test_a_newer_attempt_stops_the_old_runner_without_an_ending(
    bus: Bus, runner_bus: Bus, settings: RunnerSettings
) -> None:
    async with FakeOpenAI([Reply(text="slow", hang=True)]) as llm:
        config = make_config(llm.base_url)
        run = asyncio.create_task(execute_run(config, settings, runner_bus))
        await asyncio.wait_for(llm.hanging.wait(), 10)
        resuming = RunResuming(attempt=2, reason="heartbeat_missing")
        await bus.publish(subjects.run_event(config.run_id, "resuming"), resuming)
        terminal = await asyncio.wait_for(run, 10)
    assert isinstance(terminal, RunFailed)
    assert "superseded by attempt 2" in terminal.message
    names = [type(e).event_name for e in await run_events(bus, config.run_id)]
    assert not {"completed", "failed", "cancelled"} & set(names)


# -- killed twice, going on ----------------------------------------------------------------


async def test_a_run_killed_twice_goes_on_from_its_transcript_and_checkpoint(
    bus: Bus, runner_bus: Bus, settings: RunnerSettings, remote: Path, tmp_path: Path
) -> None:
    write_a = ToolCall("write_file", {"path": "a.txt", "content": "from turn 1\n"}, id="w1")
    shell = ToolCall("run_shell", {"command": "echo x >> count.txt && sleep 30"}, id="s2")
    write_b = ToolCall("write_file", {"path": "b.txt", "content": "from turn 2\n"}, id="w2")
    first_script = [
        Reply(tool_calls=(write_a,), hang=True),
        Reply(text="next", tool_calls=(shell, write_b)),
    ]
    async with FakeOpenAI(first_script) as llm1:
        config = make_config(llm1.base_url, repo={"url": str(remote)})
        s1 = fresh(settings, tmp_path, "a1")
        handle1 = RunHandle()
        run1 = asyncio.create_task(execute_run(config, s1, runner_bus, handle=handle1))
        await asyncio.wait_for(llm1.hanging.wait(), 15)
        await say(bus, config.run_id, "m1: given to attempt 1")
        await eventually(
            lambda: handle1.control is not None and handle1.control.received, within=15
        )
        llm1.release.set()
        await eventually((s1.workspace_root / config.run_id / "count.txt").exists, within=15)
        await kill(run1, handle1)  # while the shell command runs
    await say(bus, config.run_id, "m2: sent while no runner ran")
    # Attempt 2: the shell call is not run again, the write after it is; killed mid-call.
    async with FakeOpenAI([Reply(text="thinking", hang=True)]) as llm2:
        s2 = fresh(settings, tmp_path, "a2")
        handle2 = RunHandle()
        second = attempt(config, 2, llm2.base_url)
        run2 = asyncio.create_task(execute_run(second, s2, runner_bus, handle=handle2))
        await asyncio.wait_for(llm2.hanging.wait(), 15)
        await kill(run2, handle2)
    started = time.monotonic()
    async with FakeOpenAI([Reply(tool_calls=(ToolCall("finish", {"summary": "done"}),))]) as llm3:
        s3 = fresh(settings, tmp_path, "a3").model_copy(update={"acceptance_command": "true"})
        terminal = await execute_run(attempt(config, 3, llm3.base_url), s3, runner_bus)
    assert isinstance(terminal, RunCompleted), terminal
    print(f"attempt 3 restored and finished in {time.monotonic() - started:.2f}s")

    # The model is sent exactly what the killed attempt had sent (byte for byte).
    assert json.dumps(llm3.requests[0]) == json.dumps(llm2.requests[0])
    texts = [str(m["content"]) for m in llm2.requests[0]["messages"]]
    assert [t for t in texts if "] m1:" in t] == ["[message from ann] m1: given to attempt 1"]
    assert texts[-1] == "[message from ann] m2: sent while no runner ran"
    sent = llm2.requests[0]["messages"]
    before = llm1.requests[1]["messages"]
    assert sent[: len(before)] == before
    assert sent[len(before)]["tool_calls"][0]["id"] == "s2"
    interrupted, rewritten, _ = sent[len(before) + 1 :]
    assert interrupted["tool_call_id"] == "s2"
    assert "effect is unknown" in interrupted["content"]
    assert rewritten["tool_call_id"] == "w2"
    assert {k: v for k, v in llm2.requests[0].items() if k != "messages"} == {
        k: v for k, v in llm1.requests[1].items() if k != "messages"
    }

    workspace = s3.workspace_root / config.run_id
    assert (workspace / "a.txt").read_text() == "from turn 1\n"  # attempt 1's checkpoint
    assert (workspace / "b.txt").read_text() == "from turn 2\n"  # attempt 2's rerun
    assert not (workspace / "count.txt").exists()  # never checkpointed, never repeated
    events = await run_events(bus, config.run_id)
    calls = [e for e in events if isinstance(e, ToolCalled)]
    assert [c.call_id for c in calls].count("s2") == 1
    resumed = [e for e in events if isinstance(e, RunResumed)]
    assert [(r.attempt, r.interrupted_calls, r.rerun_calls) for r in resumed] == [
        (2, ["s2"], ["w2"]),
        (3, [], []),
    ]
    assert resumed[0].turns == 2
    assert resumed[0].checkpoint is not None
    assert resumed[0].latency_ms is not None
    assert resumed[1].entries > resumed[0].entries
    assert terminal.tokens_in == 30  # budgets count across attempts: 3 completed calls
    assert len(await read_entries(runner_bus, config.run_id)) > resumed[1].entries


async def test_a_reply_without_calls_is_nudged_as_the_dead_attempt_would_have(
    bus: Bus, runner_bus: Bus, settings: RunnerSettings
) -> None:
    async with FakeOpenAI([Reply(tool_calls=(ToolCall("finish", {"summary": "ok"}),))]) as llm:
        config = make_config(llm.base_url, attempt=2)
        said = [
            {"role": "system", "content": "s"},
            {"role": "user", "content": "task"},
            {"role": "assistant", "content": "thinking aloud"},
        ]
        for i, message in enumerate(said):
            entry = TranscriptEntry(attempt=1, index=i, op="message", message=message)
            await bus.publish(subjects.run_transcript(config.run_id), entry)
        turn = RunTurn(turn=1, model="m", tokens_in=7, tokens_out=1, cost_usd=0, duration_ms=1)
        await bus.publish(subjects.run_event(config.run_id, "turn"), turn)
        terminal = await execute_run(
            config, settings.model_copy(update={"acceptance_command": "true"}), runner_bus
        )
        assert isinstance(terminal, RunCompleted), terminal
        sent = llm.requests[0]["messages"]
    assert sent[:3] == said
    assert sent[3]["role"] == "user"
    assert sent[3]["content"].startswith("Continue with the task")
    assert terminal.tokens_in == 17  # the dead attempt's turn counts


async def test_the_wall_clock_counts_from_the_runs_first_start(
    bus: Bus, runner_bus: Bus, settings: RunnerSettings
) -> None:
    async with FakeOpenAI([Reply(text="never")]) as llm:
        config = make_config(llm.base_url, attempt=2, budgets={"max_wall_seconds": 1})
        started = RunStarted(runner="dead-host", runner_version="0")
        await bus.publish(subjects.run_event(config.run_id, "started"), started)
        clock = ManualClock()
        clock.advance(1.1)  # attempt 1's second, spent
        terminal = await execute_run(config, settings, runner_bus, clock=clock)
        assert llm.requests == []
    assert isinstance(terminal, RunFailed)
    assert terminal.reason == Reason.BUDGET_EXCEEDED
