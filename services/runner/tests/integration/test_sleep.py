"""A run that sleeps (issue 42, the runner's half; docs/resume.md, Sleep): the attempt that
calls `sleep` checkpoints, publishes `sleeping` and ends without an ending; the attempt the
scheduler starts at the wake restores the run and tells the model why it woke; bad sleeps
are refused to the model and the run goes on."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from nexus_events.contract import subjects
from nexus_events.events.runs import (
    RunCheckpointed,
    RunCompleted,
    RunConfig,
    RunDispatched,
    RunHeartbeat,
    RunResumed,
    RunResuming,
    RunSleeping,
    RunWake,
    ToolResult,
    WakeCause,
)
from nexus_events.events.warm import WarmHandoff
from nexus_events.runtime.clock import ManualClock
from nexus_events.transport.bus import Bus
from tests.fakes.openai_server import FakeOpenAI, Reply, ToolCall

from nexus_runner.app import execute_run, serve_run
from nexus_runner.checkpoint import Checkpointer
from nexus_runner.config import RunnerSettings
from nexus_runner.git import Author, Git
from nexus_runner.publisher import RunPublisher
from nexus_runner.transcript import read_entries
from nexus_runner.warm import serve as serve_handoff

from .conftest import git
from .support import make_config, names, run_events

TOOLS = ["read_file", "write_file", "sleep", "finish"]


def fresh(settings: RunnerSettings, tmp_path: Path, name: str) -> RunnerSettings:
    return settings.model_copy(
        update={"workspace_root": tmp_path / name, "acceptance_command": "true"}
    )


async def test_a_run_sleeps_and_its_next_attempt_goes_on_told_why_it_woke(
    bus: Bus, runner_bus: Bus, settings: RunnerSettings, remote: Path, tmp_path: Path
) -> None:
    write = ToolCall("write_file", {"path": "notes.txt", "content": "before the sleep\n"}, id="w1")
    nap = ToolCall("sleep", {"seconds": 5, "reason": "waiting for CI"}, id="z1")
    after = ToolCall("write_file", {"path": "late.txt", "content": "x"}, id="w2")
    async with FakeOpenAI([Reply(tool_calls=(write,)), Reply(tool_calls=(nap, after))]) as llm1:
        config = make_config(llm1.base_url, tools=TOOLS, repo={"url": str(remote)})
        s1 = fresh(settings, tmp_path, "a1")
        before = datetime.now(UTC)
        code = await serve_run(config, s1, runner_bus, trace_context=None)
        after_run = datetime.now(UTC)
    assert code == 0  # a sleep is a clean end of the attempt

    events = await run_events(bus, config.run_id)
    sleeping = [e for e in events if isinstance(e, RunSleeping)]
    assert len(sleeping) == 1
    slept = sleeping[0]
    assert before + timedelta(seconds=5) <= slept.until <= after_run + timedelta(seconds=5)
    assert (slept.reason, slept.attempt, slept.turn) == ("waiting for CI", 1, 2)
    assert not {"completed", "failed", "cancelled"} & set(names(events))
    # `sleeping` is the attempt's last word: no heartbeat (nor anything) after it.
    assert names(events)[-1] == "sleeping"
    assert any(isinstance(e, RunHeartbeat) for e in events)  # it did beat while it ran
    checkpoints = [e for e in events if isinstance(e, RunCheckpointed)]
    assert len(checkpoints) == 1
    results = {e.call_id: e for e in events if isinstance(e, ToolResult)}
    assert results["z1"].ok
    assert not results["w2"].ok  # the call after the sleep was not run
    assert not (s1.workspace_root / config.run_id / "late.txt").exists()
    entries = await read_entries(runner_bus, config.run_id)
    stored = [e.message for e in entries if e.message is not None]
    assert stored[-2]["tool_call_id"] == "z1"
    assert stored[-2]["content"].startswith("sleeping until ")
    assert stored[-1]["tool_call_id"] == "w2"
    assert stored[-1]["content"].startswith("not run: you went to sleep")

    # The scheduler wakes it (timer): `resuming` with the wake, then attempt 2's dispatch.
    wake = RunWake(
        cause=WakeCause.TIMER, slept_until=slept.until, sleep_reason=slept.reason, text=""
    )
    resuming = RunResuming(attempt=2, reason="woke", wake=wake)
    await bus.publish(subjects.run_event(config.run_id, "resuming"), resuming)
    await bus.publish(
        subjects.run_event(config.run_id, "dispatched"),
        RunDispatched(runtime="local", handle="pid-2", attempt=2),
    )
    done = ToolCall("finish", {"summary": "CI passed"}, id="f1")
    async with FakeOpenAI([Reply(tool_calls=(done,))]) as llm2:
        model = config.model.model_copy(update={"base_url": llm2.base_url})
        second = config.model_copy(update={"attempt": 2, "wake": wake, "model": model})
        s2 = fresh(settings, tmp_path, "a2")
        terminal = await execute_run(second, s2, runner_bus)
    assert isinstance(terminal, RunCompleted), terminal
    workspace = s2.workspace_root / config.run_id
    assert (workspace / "notes.txt").read_text() == "before the sleep\n"  # restored

    sent = llm2.requests[0]["messages"]
    said = llm1.requests[1]["messages"]
    assert sent[: len(said)] == said  # the conversation as it was
    assert [m.get("tool_call_id") for m in sent[len(said) + 1 : -1]] == ["z1", "w2"]
    note = sent[-1]
    assert note["role"] == "user"
    until = slept.until.replace(microsecond=0).isoformat().replace("+00:00", "Z")
    assert note["content"].startswith(
        f"[woke] You slept until {until} (waiting for CI); woken by the timer"
    )
    resumed = [e for e in await run_events(bus, config.run_id) if isinstance(e, RunResumed)]
    assert [(r.attempt, r.turns, r.checkpoint) for r in resumed] == [(2, 2, checkpoints[0].commit)]
    assert resumed[0].latency_ms is not None
    assert resumed[0].latency_ms < 60_000  # from the wake, not from the sleep
    # In the transcript: a later resume finds the note and does not add it again.
    texts = [e.message for e in await read_entries(runner_bus, config.run_id) if e.message]
    assert note in texts
    assert terminal.tokens_in == 30  # budgets count across the sleep: 3 model calls


async def test_bad_sleeps_are_refused_with_the_reason_and_the_run_goes_on(
    bus: Bus, runner_bus: Bus, settings: RunnerSettings
) -> None:
    clock = ManualClock(datetime(2026, 11, 29, 1, 0, tzinfo=UTC))
    bad = {
        "b1": {"seconds": 5, "until": "2026-11-29T02:00:00Z", "reason": "r"},
        "b2": {"reason": "r"},
        "b3": {"until": "next tuesday", "reason": "r"},
        "b4": {"until": "2026-11-28T23:00:00Z", "reason": "r"},
        "b5": {"seconds": 0.2, "reason": "r"},
        "b6": {"seconds": 7200, "reason": "r"},
        "b7": {"seconds": 5},
    }
    calls = tuple(ToolCall("sleep", body, id=key) for key, body in bad.items())
    finish = ToolCall("finish", {"summary": "did not sleep"}, id="f1")
    async with FakeOpenAI([Reply(tool_calls=calls), Reply(tool_calls=(finish,))]) as llm:
        config: RunConfig = make_config(
            llm.base_url, tools=TOOLS, resume={"max_sleep_seconds": 3600}
        )
        started = time.monotonic()
        terminal = await execute_run(
            config, fresh(settings, Path(settings.workspace_root), "w"), runner_bus, clock=clock
        )
        took = time.monotonic() - started
        answers = {
            m["tool_call_id"]: m["content"]
            for m in llm.requests[1]["messages"]
            if m.get("role") == "tool"
        }
    assert isinstance(terminal, RunCompleted), terminal
    assert took < 10
    assert "exactly one of `seconds` or `until` (both given)" in answers["b1"]
    assert "(neither given)" in answers["b2"]
    assert "'next tuesday' is not an ISO-8601 time" in answers["b3"]
    assert "2026-11-28T23:00:00Z is in the past" in answers["b4"]
    assert "sleep at least 1 s" in answers["b5"]
    assert "resume.max_sleep_seconds = 3600 s" in answers["b6"]
    assert "reason" in answers["b7"]  # the argument it lacks
    assert all(a.startswith(("error:", "sleep refused")) for a in answers.values()), answers
    events = await run_events(bus, config.run_id)
    assert "sleeping" not in names(events)
    assert json.dumps(answers)  # every call was answered


async def test_a_warm_runner_that_sleeps_exits_0_with_sleeping_stored(
    bus: Bus,
    settings: RunnerSettings,
    nats_url: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The warm entry (`nexus_runner.warm.serve`, what a warm pod's claim runs too) ends a
    sleeping attempt as the cold one does."""
    monkeypatch.setenv("NEXUS_NATS_URL", nats_url)
    near = (datetime.now(UTC) + timedelta(hours=1)).replace(microsecond=0, tzinfo=None)
    nap = ToolCall("sleep", {"until": near.isoformat(), "reason": "an hour"}, id="z1")  # naive
    async with FakeOpenAI([Reply(tool_calls=(nap,))]) as llm:
        config = make_config(llm.base_url, tools=TOOLS)
        workspace = tmp_path / "warm" / config.run_id
        handoff = WarmHandoff(config=config, env={}, workspace=str(workspace))
        code = await serve_handoff(handoff, fresh(settings, tmp_path, "warm"))
    assert code == 0
    events = await run_events(bus, config.run_id)
    sleeping = [e for e in events if isinstance(e, RunSleeping)]
    assert [(s.reason, s.until) for s in sleeping] == [("an hour", near.replace(tzinfo=UTC))]
    assert names(events)[-1] == "sleeping"


async def test_before_a_sleep_an_agents_commit_that_changed_no_file_is_checkpointed(
    runner_bus: Bus, tmp_path: Path
) -> None:
    """`after_call` checkpoints changed files only; before a sleep, `settle` also keeps a HEAD
    that moved (a restore would otherwise put the branch back before the agent's commit)."""
    run_id = f"run-zz{time.time_ns() % 10**9}"
    work = tmp_path / "work"
    work.mkdir()
    git(work, "init", "-q", "-b", "main")
    (work / "a.txt").write_text("a\n")
    git(work, "add", "-A")
    git(work, "commit", "-q", "-m", "base")
    base = git(work, "rev-parse", "HEAD").strip()
    author = Author("Nexus Agent", "agent@nexus.local")
    ck = Checkpointer(
        Git(work, author), runner_bus.js, RunPublisher(runner_bus, run_id, 1), base_sha=base
    )
    await ck.start()
    assert await ck.settle(1) is None  # the clean clone: nothing to keep
    (work / "a.txt").write_text("a2\n")
    assert await ck.after_call(1) is not None
    git(work, "commit", "-qam", "agent commit")  # the tree is the checkpoint's
    agent_commit = git(work, "rev-parse", "HEAD").strip()
    assert await ck.after_call(2) is None
    kept = await ck.settle(2)
    assert kept is not None
    assert await ck.settle(2) is None  # once
    ck.close()

    clone = tmp_path / "clone"
    git(tmp_path, "clone", "-q", str(work / ".git"), str(clone))
    git(clone, "reset", "-q", "--hard", base)
    restorer = Checkpointer(
        Git(clone, author), runner_bus.js, RunPublisher(runner_bus, run_id, 2), base_sha=base
    )
    await restorer.restore(kept)
    assert git(clone, "rev-parse", "HEAD").strip() == agent_commit
    assert (clone / "a.txt").read_text() == "a2\n"
    restorer.close()
