"""A run confined by bubblewrap, started as the scheduler starts it (`LocalProcessRuntime`
with a `Confinement`, the real runner, real NATS, the fake model): it completes (NATS and
the model are reachable), and its configured test command, run inside it, can neither read
a file in another temp dir nor reach a listener on 127.0.0.1 that is not NATS or the model,
nor see a secret of the environment that started the stack."""

from __future__ import annotations

import json
import shutil
import socket
import sys
from pathlib import Path

import pytest
from nexus_events.events.runs import RunCompleted, ToolResult
from nexus_events.transport.bus import Bus
from nexus_scheduler.runtime.confinement import Confinement
from nexus_scheduler.runtime.local import LocalProcessRuntime
from nexus_testing import eventually
from tests.fakes.openai_server import FakeOpenAI, Reply, ToolCall

from .support import make_config, run_events

PROBE = Path(__file__).resolve().parents[3] / "scheduler" / "tests" / "confinement_probe.py"


async def test_a_confined_run_completes_and_reaches_nothing_else(
    bus: Bus,
    nats_url: str,
    tmp_path: Path,
    tmp_path_factory: pytest.TempPathFactory,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    outside = tmp_path_factory.mktemp("elsewhere") / "secret.txt"
    outside.write_text("outside-the-workspace")
    for name, value in {
        "DEPLOY_TOKEN": "hunter2",  # whatever started the stack had it
        "NEXUS_NATS_URL": nats_url,
        "NEXUS_BUDGET_RESERVATIONS": "off",  # no spend service here
        "NEXUS_WORKSPACE_ROOT": str(tmp_path / "workspaces"),
        "NEXUS_HEARTBEAT_INTERVAL": "1",
        "OTEL_SDK_DISABLED": "true",
        # The test command runs in the tools' sandbox, which shows the probe script only
        # through the operator's allowlist (it is in the project's sources).
        "NEXUS_TOOL_SANDBOX_READABLE": json.dumps([str(PROBE.parent)]),
    }.items():
        monkeypatch.setenv(name, value)
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        command = f"{sys.executable} -I {PROBE} read={outside} connect=127.0.0.1:{port}"
        command += " out=probe.json"  # in the workspace (cwd of the test command)
        script = [
            Reply(tool_calls=(ToolCall("run_tests", {}, id="probe"),)),
            Reply(tool_calls=(ToolCall("finish", {"summary": "probed"}),)),
        ]
        runtime = LocalProcessRuntime(
            tmp_path / "runner-dirs",
            command=(sys.executable, "-m", "nexus_runner"),
            confinement=Confinement(shutil.which("bwrap") or "bwrap"),
        )
        await runtime.start()
        try:
            async with FakeOpenAI(script) as llm:
                config = make_config(
                    llm.base_url,
                    tools=[
                        "run_tests",
                        "finish",
                        {"name": "run_tests", "options": {"command": command}},
                    ],
                )
                await runtime.start_run(config)
                status = await eventually(
                    lambda: runtime.status(config.run_id),
                    lambda s: not s.live,
                    within=60,
                    interval=0.2,
                    what="the confined runner to end",
                )
        finally:
            await runtime.close()
    log = (runtime.run_dir(config.run_id) / "runner.log").read_text()
    assert status.exit_code == 0, log
    events = await run_events(bus, config.run_id)
    assert isinstance(events[-1], RunCompleted), log
    [result] = [e for e in events if isinstance(e, ToolResult) and e.call_id == "probe"]
    assert result.ok, result.output
    report = json.loads((tmp_path / "workspaces" / config.run_id / "probe.json").read_text())
    assert report[f"read={outside}"] == "FileNotFoundError"
    assert report[f"connect=127.0.0.1:{port}"] == "ConnectionRefusedError"
    assert "DEPLOY_TOKEN" not in report["env"]
