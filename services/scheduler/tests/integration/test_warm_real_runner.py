"""The real runner, warm (``python -m nexus_runner --warm``) and confined by bubblewrap, on real
NATS and the fake model: a run handed to a warm runner publishes the same events as the same
run started cold, and its tools work in the warm runner's own workspace."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest
from nexus_events.contract.streams import RUNS
from nexus_events.events import RunConfig
from nexus_events.events.runs import RunCompleted, RunHeartbeat, ToolResult
from nexus_events.transport.bus import Bus
from nexus_scheduler.runtime.confinement import Confinement
from nexus_scheduler.runtime.local import LocalProcessRuntime
from nexus_scheduler.runtime.warm_runners import TAKEN_FILE, WORKSPACE_FILE

from tests.fakes.openai_server import FakeOpenAI, Reply, ToolCall

from ..factories import config
from ..waiting import eventually


def shell_run(run_id: str, base_url: str) -> RunConfig:
    body = config(run_id).model_dump(mode="json")
    body["model"]["base_url"] = base_url
    return RunConfig.model_validate({**body, "tools": ["run_shell", "finish"]})


def script() -> list[Reply]:
    shell = ToolCall("run_shell", {"command": "echo hi > made.txt && cat made.txt"}, id="sh")
    return [Reply(tool_calls=(shell,)), Reply(tool_calls=(ToolCall("finish", {"summary": "ok"}),))]


async def events_of(bus: Bus, run_id: str) -> list[object]:
    return [d.event async for d in bus.replay(RUNS, run_id=run_id)]


async def test_a_warm_confined_run_publishes_what_a_cold_one_does(
    bus: Bus, nats_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in {
        "NEXUS_NATS_URL": nats_url,
        "NEXUS_BUDGET_RESERVATIONS": "off",  # no spend service here
        "NEXUS_WORKSPACE_ROOT": str(tmp_path / "workspaces"),
        "OTEL_SDK_DISABLED": "true",
    }.items():
        monkeypatch.setenv(name, value)
    runtime = LocalProcessRuntime(
        tmp_path / "runs",
        command=(sys.executable, "-m", "nexus_runner"),
        confinement=Confinement(shutil.which("bwrap") or "bwrap"),
        warm_pool={"default": 1},
    )
    await runtime.start()
    try:
        async with FakeOpenAI([*script(), *script()]) as llm:
            for run_id in ("cold", "warm"):
                if run_id == "warm":
                    assert runtime.warm is not None
                    await eventually(
                        lambda: runtime.warm.pool.idle_count,  # type: ignore[union-attr]
                        within=60,
                        what="a warm runner",
                    )
                await runtime.start_run(shell_run(run_id, llm.base_url))
                status = await eventually(
                    lambda run_id=run_id: runtime.status(run_id),
                    lambda s: not s.live,
                    within=90,
                    interval=0.2,
                    what=f"the {run_id} runner to end",
                )
                log = (runtime.run_dir(run_id) / "runner.log").read_text()
                assert status.exit_code == 0, log
    finally:
        await runtime.close()
    assert not (runtime.run_dir("cold") / TAKEN_FILE).exists()
    assert (runtime.run_dir("warm") / TAKEN_FILE).exists()  # served by a warm runner
    shapes = []
    for run_id in ("cold", "warm"):
        events = [e for e in await events_of(bus, run_id) if not isinstance(e, RunHeartbeat)]
        assert isinstance(events[-1], RunCompleted)
        [result] = [e for e in events if isinstance(e, ToolResult) and e.call_id == "sh"]
        assert result.ok, result.output
        assert "hi" in result.output
        shapes.append([type(e).event_name for e in events])
    assert shapes[0] == shapes[1]
    workspace = Path((runtime.run_dir("warm") / WORKSPACE_FILE).read_text())
    assert workspace.parent == tmp_path / "workspaces"
    assert (workspace / "made.txt").read_text() == "hi\n"
