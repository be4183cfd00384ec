"""Acceptance of sleep (issue 42) end to end: the scheduler with the local runtime, the real
`python -m nexus_runner` and the dev stack's offline model (its `sleep` script). A run writes a
file, sleeps 5 s (its runner exits, its slot goes to another run, which completes meanwhile),
wakes at its time as attempt 2 with its transcript and workspace intact, reads the file back
and completes."""

from __future__ import annotations

import subprocess
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from nexus_cli.devstack.offline_model import SLEEP_TEXT, WOKE
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

from tests.support.offline_model import offline_model

from ..factories import config
from ..waiting import eventually
from .conftest import AppFactory, publish_prepared, run_events
from .test_restart import pids, service  # noqa: F401 - `pids` is a fixture

pytestmark = pytest.mark.skipif(not Path("/proc").is_dir(), reason="needs /proc (Linux)")

SLEEPER = "[offline-model:sleep] Wait for CI, then check the file."
OTHER = "[offline-model:chat] Something quick."


def repo(path: Path) -> str:
    path.mkdir()
    for args in (("init", "-q", "-b", "main"), ("config", "user.email", "t@x"),
                 ("config", "user.name", "t")):  # fmt: skip
        subprocess.run(["git", *args], cwd=path, check=True)
    (path / "README.md").write_text("repo\n")
    subprocess.run(["git", "add", "-A"], cwd=path, check=True)
    subprocess.run(["git", "commit", "-q", "-m", "base"], cwd=path, check=True)
    return str(path)


def run_config(
    run_id: str,
    task: str,
    base_url: str,
    url: str,
    tools: tuple[str, ...] = ("read_file", "write_file", "sleep", "finish"),
) -> RunConfig:
    body = config(run_id, wall_seconds=600).model_dump(mode="json")
    body["model"]["base_url"] = base_url
    return RunConfig.model_validate(
        {**body, "input": task, "tools": list(tools), "repo": RepoSpec(url=url).model_dump()}
    )


def local_runtime(tmp_path: Path, nats_url: str) -> LocalProcessRuntime:
    """The local runtime starting the real `python -m nexus_runner` on this NATS."""
    return LocalProcessRuntime(
        tmp_path / "runs",
        kill_grace=3,
        env={
            "NEXUS_NATS_URL": nats_url,
            "NEXUS_BUDGET_RESERVATIONS": "off",  # no spend service here
            "NEXUS_WORKSPACE_ROOT": str(tmp_path / "workspaces"),
            "OTEL_SDK_DISABLED": "true",
        },
    )


async def one_event(bus: Bus, name: str, run_id: str) -> Any:
    """The run's first event called `name`, or None."""
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
    async with offline_model() as base_url:
        runtime = local_runtime(tmp_path, nats_url)
        app = await make_app(runtime, max_concurrent_runs=1, exit_grace_seconds=5)
        svc = service(app)
        await publish_prepared(
            bus,
            [
                run_config("r", SLEEPER, base_url, url),
                run_config("o", OTHER, base_url, url),
            ],
        )
        sleeping: RunSleeping = await eventually(
            lambda: one_event(bus, "sleeping", "r"), within=90, interval=0.2, what="r sleeps"
        )
        assert (sleeping.attempt, sleeping.reason) == (1, "waiting for CI")
        # Its slot goes to the other run, which runs to its end while r sleeps.
        await eventually(
            lambda: one_event(bus, "completed", "o"), within=90, interval=0.2, what="o"
        )
        await eventually(
            lambda: runtime.status("r", attempt=1), lambda s: not s.live, within=30, what="exit"
        )
        await svc.tick()  # the exited runner is no loss
        assert await one_event(bus, "resuming", "r") is None
        assert await run_events(bus, "lost") == []

        clock.set(sleeping.until + timedelta(milliseconds=1))  # 5 s later
        await svc.tick()
        resuming: RunResuming = await eventually(lambda: one_event(bus, "resuming", "r"))
        assert (resuming.attempt, resuming.reason) == (2, "woke")
        assert resuming.wake is not None
        assert resuming.wake.cause is WakeCause.TIMER
        done: RunCompleted = await eventually(
            lambda: one_event(bus, "completed", "r"), within=90, interval=0.2, what="r completes"
        )
        resumed: RunResumed = await one_event(bus, "resumed", "r")
        assert resumed.attempt == 2
    # The woken attempt went on from its transcript (the script's third turn, not its first
    # again: it slept once), its read found the file written before the sleep (the workspace
    # was restored), and it was told why and by what it woke.
    assert done.result.summary == "Slept, woke and found my note."
    assert done.result.details["read"] == SLEEP_TEXT
    woke = done.result.details["woke"]
    assert woke.startswith(WOKE)
    assert "waiting for CI" in woke
    assert "timer" in woke
    assert len([e for r, e in await run_events(bus, "sleeping") if r == "r"]) == 1
    assert len([e for r, e in await run_events(bus, "resuming") if r == "r"]) == 1
    # One slot: the other run was dispatched only once r slept, r's attempt 2 only once the
    # other run had ended.
    order = [(r, type(e).event_name) for r, e in await run_events(bus)]
    assert order.index(("r", "sleeping")) < order.index(("o", "dispatched"))
    assert order.index(("o", "completed")) < order.index(("r", "resumed"))
