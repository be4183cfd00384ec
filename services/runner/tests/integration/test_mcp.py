"""MCP servers as tools: our fake stdio server (tests/fakes/mcp_server.py) run by the real
`mcp` client inside the real runner, against real NATS and the fake model."""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from nexus_events.events.runs import (
    ApprovalDecided,
    McpServerUnavailable,
    Reason,
    RunCancelled,
    RunCompleted,
    ToolResult,
)
from nexus_events.transport.bus import Bus
from nexus_testing import eventually
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from pydantic import SecretStr
from tests.fakes.openai_server import FakeOpenAI, Reply, ToolCall

from nexus_runner.app import RunHandle, execute_run
from nexus_runner.config import RunnerSettings
from nexus_runner.errors import RunStopped

from .support import log_text, make_config, run_events, wait_for
from .test_scenarios import _decide

FAKE_SERVER = Path(__file__).resolve().parents[4] / "tests" / "fakes" / "mcp_server.py"
SECRET = "s3cr3t-value-0123456789"
ECHO = "mcp_fake__echo"


def tc(name: str, **args: Any) -> ToolCall:
    return ToolCall(name, args)


def finish() -> Reply:
    return Reply(tool_calls=(tc("finish", summary="done"),))


def server(**overrides: Any) -> dict[str, Any]:
    # -P: the script's directory (tests/fakes, which has an http.py) must not shadow stdlib.
    spec: dict[str, Any] = {
        "name": "fake",
        "command": sys.executable,
        "args": ["-P", str(FAKE_SERVER)],
        "env": {"FAKE_MCP_TOKEN": "fake-token"},
        "tools": ["echo", "fail", "hang", "crash", "leak", "env_names"],
        "auto_approve": ["*"],
    }
    spec.update(overrides)
    return spec


@pytest.fixture
def mcp_settings(settings: RunnerSettings) -> RunnerSettings:
    return settings.model_copy(
        update={
            "mcp_secrets": {"fake-token": SecretStr(SECRET)},
            # Generous: a loaded CI machine once took over 2 s for the fake's "fail" call;
            # the hung-call test sets its own short bound.
            "mcp_call_timeout": 15.0,
            "mcp_startup_timeout": 15,
            "mcp_restart_backoff": 0.01,
            "mcp_max_restarts": 1,
            # These tests follow the servers' processes by the pids they record, which the
            # tools' sandbox (its own PID namespace) renames: a sandboxed server is tested in
            # test_tool_sandbox_run.py.
            "tool_sandbox": "off",
        }
    )


def tool_outputs(request: dict[str, Any]) -> list[str]:
    return [str(m["content"]) for m in request["messages"] if m.get("role") == "tool"]


def offered(request: dict[str, Any]) -> set[str]:
    return {t["function"]["name"] for t in request.get("tools", [])}


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, IndexError):
        return False
    return state != "Z"


async def assert_all_gone(workspace: Path, timeout: float = 5) -> list[int]:
    pids = [int(p) for p in (workspace / "mcp-pids.txt").read_text().split()]
    await eventually(
        lambda: [p for p in pids if alive(p)],
        lambda left: not left,
        within=timeout,
        interval=0.05,
        what="every MCP server process gone",
    )
    return pids


async def test_granted_tools_reach_the_model_and_secrets_do_not_leak(
    bus: Bus, runner_bus: Bus, mcp_settings: RunnerSettings, exporter: InMemorySpanExporter
) -> None:
    script = [
        Reply(tool_calls=(tc(ECHO, text="hello"), tc("mcp_fake__fail", message="nope"))),
        Reply(tool_calls=(tc("mcp_fake__leak"), tc("mcp_fake__env_names"))),
        finish(),
    ]
    granted = ["echo", "fail", "leak", "env_names"]
    async with FakeOpenAI(script) as llm:
        config = make_config(llm.base_url, mcp_servers=[server(tools=granted)])
        terminal = await execute_run(config, mcp_settings, runner_bus)
    assert isinstance(terminal, RunCompleted), terminal
    tools = offered(llm.requests[0])
    assert {ECHO, "mcp_fake__fail", "mcp_fake__leak"} <= tools
    assert "mcp_fake__crash" not in tools  # not granted
    assert "mcp_fake__hang" not in tools
    schema = next(t for t in llm.requests[0]["tools"] if t["function"]["name"] == ECHO)
    assert schema["function"]["parameters"]["properties"]["text"]["type"] == "string"
    outputs = tool_outputs(llm.requests[1])
    assert outputs[0] == "echo: hello"
    assert "nope" in outputs[1] or "Error" in outputs[1]
    final = tool_outputs(llm.requests[2])
    assert "the token is [REDACTED]" in final[2]
    # Only what the runner names reaches the server's environment.
    assert set(final[3].split(",")) <= {"PATH", "HOME", "LANG", "FAKE_MCP_TOKEN", "PWD"}
    assert "FAKE_MCP_TOKEN" in final[3]
    results = {e.tool: e for e in await run_events(bus, config.run_id) if isinstance(e, ToolResult)}
    assert results[ECHO].ok
    assert not results["mcp_fake__fail"].ok
    everything = str(await run_events(bus, config.run_id)) + str(llm.requests)
    from .support import log_text

    for stream in ("runner", "llm_text"):
        everything += await log_text(bus, config.run_id, stream)
    assert SECRET not in everything
    await assert_all_gone(mcp_settings.workspace_root / config.run_id)
    spans = [
        s
        for s in exporter.get_finished_spans()
        if (s.attributes or {}).get("nexus.run_id") == config.run_id
        and (s.attributes or {}).get("gen_ai.tool.name") == ECHO
    ]
    assert [(s.attributes or {}).get("nexus.mcp.server") for s in spans] == ["fake"]
    assert (spans[0].attributes or {}).get("nexus.outcome") == "ok"


@pytest.mark.parametrize(
    ("decision", "verdict", "output"),
    [
        ("approve", "approved", "echo: approved?"),
        ("deny", "denied", "approval denied by ann: the call was not run"),
    ],
)
async def test_mcp_tools_ask_for_approval_by_default(
    bus: Bus,
    runner_bus: Bus,
    mcp_settings: RunnerSettings,
    decision: str,
    verdict: str,
    output: str,
) -> None:
    script = [Reply(tool_calls=(tc(ECHO, text="approved?"),)), finish()]
    # Another tool's auto-approval does not cover echo: it still asks.
    mcp = server(tools=["echo", "leak"], auto_approve=["leak"])
    async with FakeOpenAI(script) as llm:
        config = make_config(llm.base_url, mcp_servers=[mcp])
        run = asyncio.create_task(execute_run(config, mcp_settings, runner_bus))
        await _decide(bus, config.run_id, decision)
        terminal = await asyncio.wait_for(run, 20)
    assert isinstance(terminal, RunCompleted), terminal
    decided = [e for e in await run_events(bus, config.run_id) if isinstance(e, ApprovalDecided)]
    assert [d.decision for d in decided] == [verdict]
    assert tool_outputs(llm.requests[1]) == [output]


async def test_hung_call_times_out_and_the_run_goes_on(
    bus: Bus, runner_bus: Bus, mcp_settings: RunnerSettings
) -> None:
    script = [
        Reply(tool_calls=(tc("mcp_fake__hang"),)),
        Reply(tool_calls=(tc(ECHO, text="still here"),)),
        finish(),
    ]
    settings = mcp_settings.model_copy(update={"mcp_call_timeout": 2.0})
    async with FakeOpenAI(script) as llm:
        config = make_config(llm.base_url, mcp_servers=[server()])
        started = time.monotonic()
        terminal = await asyncio.wait_for(execute_run(config, settings, runner_bus), 30)
    assert isinstance(terminal, RunCompleted), terminal
    assert "timed out after 2s" in tool_outputs(llm.requests[1])[0]
    assert tool_outputs(llm.requests[2])[1] == "echo: still here"
    assert time.monotonic() - started < 20
    # The hung tool's own child process went with the server's process group.
    assert len(await assert_all_gone(settings.workspace_root / config.run_id)) >= 2


async def test_crashed_server_is_restarted_then_withdrawn(
    bus: Bus, runner_bus: Bus, mcp_settings: RunnerSettings
) -> None:
    script = [
        Reply(tool_calls=(tc("mcp_fake__crash"),)),
        Reply(tool_calls=(tc(ECHO, text="after restart"),)),
        Reply(tool_calls=(tc("mcp_fake__crash"),)),
        Reply(tool_calls=(tc(ECHO, text="withdrawn"),)),
        finish(),
    ]
    async with FakeOpenAI(script) as llm:
        config = make_config(llm.base_url, mcp_servers=[server()])
        terminal = await asyncio.wait_for(execute_run(config, mcp_settings, runner_bus), 30)
    assert isinstance(terminal, RunCompleted), terminal
    first = tool_outputs(llm.requests[1])[0]
    assert "crashed during crash" in first
    assert "restarted" in first
    assert "crashing on purpose" in first  # the server's stderr, for the model
    assert tool_outputs(llm.requests[2])[1] == "echo: after restart"
    assert "withdrawn" in tool_outputs(llm.requests[3])[2]
    assert ECHO in offered(llm.requests[2])
    assert ECHO not in offered(llm.requests[3])  # the model is no longer offered them
    assert (
        "refused" in tool_outputs(llm.requests[4])[3]
        or "withdrawn" in tool_outputs(llm.requests[4])[3]
    )
    pids = await assert_all_gone(mcp_settings.workspace_root / config.run_id)
    assert len(pids) == 2  # two server processes: the first and its restart


async def test_cancel_during_a_call_leaves_no_process(
    bus: Bus, runner_bus: Bus, mcp_settings: RunnerSettings
) -> None:
    settings = mcp_settings.model_copy(update={"mcp_call_timeout": 60})
    script = [Reply(tool_calls=(tc("mcp_fake__hang"),)), finish()]
    handle = RunHandle()
    async with FakeOpenAI(script) as llm:
        config = make_config(llm.base_url, mcp_servers=[server()])
        run = asyncio.create_task(execute_run(config, settings, runner_bus, handle=handle))
        await wait_for(bus, config.run_id, "tool_called")
        workspace = settings.workspace_root / config.run_id
        await eventually(  # the hang's child
            lambda: len((workspace / "mcp-pids.txt").read_text().split()) >= 2,
            interval=0.05,
            what="the hanging tool's child started",
        )
        handle.stop(RunStopped("cancelled", Reason.TERMINATED, "test"))
        terminal = await asyncio.wait_for(run, 15)
    assert isinstance(terminal, RunCancelled), terminal
    assert len(await assert_all_gone(workspace)) == 2


async def test_servers_that_cannot_start_are_left_out_and_the_model_is_told(
    bus: Bus, runner_bus: Bus, mcp_settings: RunnerSettings
) -> None:
    settings = mcp_settings
    silent = server(name="silent", command="/bin/sleep", args=["30"], env={}, startup_timeout=1.0)
    nosecret = server(name="nosecret", env={"FAKE_MCP_TOKEN": "no-such-secret"})
    dies = server(
        name="dies", command="/bin/sh", args=["-c", "echo gone >&2; echo more >&2; exit 4"], env={}
    )
    # Installed where the run cannot see it (issue 35: ~/.local/bin, /tmp under confinement).
    hidden = server(name="hidden", command="/nonexistent/bin/mcp-hidden", args=[], env={})
    # The model tries a tool of the hidden server, then finishes.
    script = [Reply(tool_calls=(tc("mcp_hidden__search", q="x"),)), finish()]
    async with FakeOpenAI(script) as llm:
        specs = [silent, nosecret, dies, hidden, server()]
        config = make_config(llm.base_url, mcp_servers=specs)
        terminal = await asyncio.wait_for(execute_run(config, settings, runner_bus), 30)
    assert isinstance(terminal, RunCompleted), terminal
    expected = {
        "silent": ("handshake_timeout", "did not answer the handshake within 1s", None),
        "nosecret": ("missing_secret", "unknown secret(s) no-such-secret", None),
        "dies": ("exited", "exited with code 4 before the handshake; stderr: gone", 4),
        "hidden": (
            "command_not_found",
            "command '/nonexistent/bin/mcp-hidden' not found: not on the run's PATH, or hidden"
            " from its sandbox",
            None,
        ),
    }
    # The run's timeline: one event per server left out, saying why.
    events = await run_events(bus, config.run_id)
    recorded = {
        e.server: (e.reason, e.detail, e.exit_code)
        for e in events
        if isinstance(e, McpServerUnavailable)
    }
    assert recorded == expected
    # The model is told on its first turn, and the log says the same.
    system = str(llm.requests[0]["messages"])
    log = await log_text(bus, config.run_id, "runner")
    for name, (_, detail, _) in expected.items():
        note = f"MCP server {name} is unavailable ({detail}); its tools cannot be called"
        assert note in system, name
        assert note in log, name
    tools = offered(llm.requests[0])
    assert ECHO in tools  # the healthy server is still there
    assert not any(
        t.startswith(("mcp_silent__", "mcp_nosecret__", "mcp_dies__", "mcp_hidden__"))
        for t in tools
    )
    # A call to a tool of the hidden server says why, not "not granted".
    [refusal] = tool_outputs(llm.requests[1])
    assert "MCP server hidden is unavailable (command '/nonexistent/bin/mcp-hidden'" in refusal
    assert "not granted" not in refusal


async def test_streamable_http_server(
    bus: Bus, runner_bus: Bus, mcp_settings: RunnerSettings
) -> None:
    import uvicorn
    from tests.fakes import mcp_server

    app = mcp_server.server.streamable_http_app()
    web = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning"))
    serving = asyncio.create_task(web.serve())
    await eventually(lambda: web.started, what="uvicorn started")
    port = web.servers[0].sockets[0].getsockname()[1]
    try:
        http = {
            "name": "web",
            "transport": "http",
            "url": f"http://127.0.0.1:{port}/mcp",
            "tools": ["echo"],
            "auto_approve": ["echo"],
        }
        script = [Reply(tool_calls=(tc("mcp_web__echo", text="over http"),)), finish()]
        async with FakeOpenAI(script) as llm:
            config = make_config(llm.base_url, mcp_servers=[http])
            terminal = await asyncio.wait_for(execute_run(config, mcp_settings, runner_bus), 30)
    finally:
        web.should_exit = True
        await serving
    assert isinstance(terminal, RunCompleted), terminal
    assert offered(llm.requests[0]) >= {"mcp_web__echo"}
    assert tool_outputs(llm.requests[1]) == ["echo: over http"]


async def test_a_refused_tool_is_told_every_granted_tool_mcp_included(
    bus: Bus, runner_bus: Bus, mcp_settings: RunnerSettings
) -> None:
    script = [Reply(tool_calls=(tc("delete_everything"),)), finish()]
    async with FakeOpenAI(script) as llm:
        config = make_config(llm.base_url, mcp_servers=[server(tools=["echo", "fail"])])
        terminal = await execute_run(config, mcp_settings, runner_bus)
    assert isinstance(terminal, RunCompleted), terminal
    refusal = tool_outputs(llm.requests[1])[0]
    assert "'delete_everything' is not granted" in refusal
    assert "finish" in refusal  # a built-in tool
    assert ECHO in refusal  # the granted MCP tools
    assert "mcp_fake__fail" in refusal
    assert "mcp_fake__crash" not in refusal  # offered by the server, not granted
