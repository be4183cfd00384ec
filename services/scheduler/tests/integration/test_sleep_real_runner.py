"""Acceptance of sleep (issue 42) end to end: the scheduler with the local runtime, the real
`python -m nexus_runner` and the fake model. A run writes a file, sleeps 5 s (its runner
exits, its slot goes to another run, which completes meanwhile), wakes at its time as attempt
2 with its transcript and workspace intact, reads the file back and completes."""

from __future__ import annotations

import json
import subprocess
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from nexus_events.events import (
    RepoSpec,
    RunCompleted,
    RunConfig,
    RunResumed,
    RunResuming,
    RunSleeping,
    WakeCause,
)
from nexus_events.runtime.clock import ManualClock
from nexus_events.transport.bus import Bus
from nexus_scheduler.runtime.local import LocalProcessRuntime

from tests.fakes.openai_server import FakeOpenAI, Reply, ToolCall

from ..factories import config
from ..waiting import eventually
from .conftest import AppFactory, publish_prepared, run_events
from .test_restart import pids, service  # noqa: F401 - `pids` is a fixture

pytestmark = pytest.mark.skipif(not Path("/proc").is_dir(), reason="needs /proc (Linux)")

SLEEPER, OTHER = "Wait for CI, then check the file.", "Something quick."


def _call(name: str, args: dict[str, Any]) -> Reply:
    return Reply(tool_calls=(ToolCall(name, args),))


def model(body: dict[str, Any]) -> Reply:
    """The fake model, by the run it answers (its task) and how far its conversation is."""
    messages = body["messages"]
    if OTHER in json.dumps(messages):
        return _call("finish", {"summary": "other done"})
    turn = sum(1 for m in messages if m["role"] == "assistant")
    if turn == 0:
        return _call("write_file", {"path": "note.txt", "content": "written before the sleep"})
    if turn == 1:
        return _call("sleep", {"seconds": 5, "reason": "waiting for CI"})
    if turn == 2:
        return _call("read_file", {"path": "note.txt"})
    return _call("finish", {"summary": "read it back after the sleep"})


def repo(path: Path) -> str:
    path.mkdir()
    for args in (("init", "-q", "-b", "main"), ("config", "user.email", "t@x"),
                 ("config", "user.name", "t")):  # fmt: skip
        subprocess.run(["git", *args], cwd=path, check=True)
    (path / "README.md").write_text("repo\n")
    subprocess.run(["git", "add", "-A"], cwd=path, check=True)
    subprocess.run(["git", "commit", "-q", "-m", "base"], cwd=path, check=True)
    return str(path)


def run_config(run_id: str, task: str, base_url: str, url: str) -> RunConfig:
    body = config(run_id, wall_seconds=600).model_dump(mode="json")
    body["model"]["base_url"] = base_url
    tools = ["read_file", "write_file", "sleep", "finish"]
    return RunConfig.model_validate(
        {**body, "input": task, "tools": tools, "repo": RepoSpec(url=url).model_dump()}
    )


async def _one(bus: Bus, name: str, run_id: str) -> Any:
    return next((e for r, e in await run_events(bus, name) if r == run_id), None)


async def test_a_run_sleeps_5s_gives_its_slot_away_and_wakes_as_attempt_2_intact(
    make_app: AppFactory,
    bus: Bus,
    clock: ManualClock,
    tmp_path: Path,
    nats_url: str,
    pids: list[int],  # noqa: F811
) -> None:
    url = repo(tmp_path / "origin")
    async with FakeOpenAI([], default=model) as llm:  # type: ignore[arg-type]
        runtime = LocalProcessRuntime(
            tmp_path / "runs",
            kill_grace=3,
            env={
                "NEXUS_NATS_URL": nats_url,
                "NEXUS_BUDGET_RESERVATIONS": "off",  # no spend service here
                "NEXUS_WORKSPACE_ROOT": str(tmp_path / "workspaces"),
                "OTEL_SDK_DISABLED": "true",
            },
        )
        app = await make_app(runtime, max_concurrent_runs=1, exit_grace_seconds=5)
        svc = service(app)
        await publish_prepared(
            bus,
            [
                run_config("r", SLEEPER, llm.base_url, url),
                run_config("o", OTHER, llm.base_url, url),
            ],
        )
        sleeping: RunSleeping = await eventually(
            lambda: _one(bus, "sleeping", "r"), within=90, interval=0.2, what="r sleeps"
        )
        assert (sleeping.attempt, sleeping.reason) == (1, "waiting for CI")
        # Its slot goes to the other run, which runs to its end while r sleeps.
        await eventually(lambda: _one(bus, "completed", "o"), within=90, interval=0.2, what="o")
        await eventually(
            lambda: runtime.status("r", attempt=1), lambda s: not s.live, within=30, what="exit"
        )
        await svc.tick()  # the exited runner is no loss
        assert await _one(bus, "resuming", "r") is None
        assert await run_events(bus, "lost") == []

        clock.set(sleeping.until + timedelta(milliseconds=1))  # 5 s later
        await svc.tick()
        resuming: RunResuming = await eventually(lambda: _one(bus, "resuming", "r"))
        assert (resuming.attempt, resuming.reason) == (2, "woke")
        assert resuming.wake is not None
        assert resuming.wake.cause is WakeCause.TIMER
        done: RunCompleted = await eventually(
            lambda: _one(bus, "completed", "r"), within=90, interval=0.2, what="r completes"
        )
        resumed: RunResumed = await _one(bus, "resumed", "r")
        assert resumed.attempt == 2
    assert done.result.summary == "read it back after the sleep"
    # The woken attempt's first call carried the whole conversation before the sleep, and
    # its read found the file written before it (the workspace was restored).
    woken = [b for b in llm.requests if SLEEPER in json.dumps(b["messages"])]
    before, after = woken[1], woken[2]
    assert after["messages"][: len(before["messages"])] == before["messages"]
    reads = [m for m in woken[3]["messages"] if m["role"] == "tool"]
    assert "written before the sleep" in json.dumps(reads[-1])
    assert len([e for r, e in await run_events(bus, "resuming") if r == "r"]) == 1
    # One slot: the other run was dispatched only once r slept, r's attempt 2 only once the
    # other run had ended.
    order = [(r, type(e).event_name) for r, e in await run_events(bus)]
    assert order.index(("r", "sleeping")) < order.index(("o", "dispatched"))
    assert order.index(("o", "completed")) < order.index(("r", "resumed"))
