"""MCP tool call overhead: a call through the nexus runner vs a direct `mcp` client call to
the same fake stdio server (tests/fakes/mcp_server.py), in one run.

Three figures per call of the server's ``echo`` tool:

- direct: the `mcp` package's own `Client` over its own `stdio_client`, `call_tool` in a
  loop (the baseline);
- registry: the runner's tool path without the model, the path each model-issued call takes
  after the loop has it: `ToolRegistry.decide` (parse, grant, approval rule) and `execute`
  (our stdio transport, per-call timeout, result text, secret replacement);
- in a run: whole runs of the nexus runner whose every turn calls the MCP tool, minus the
  same runs whose every turn calls the built-in `list_files` (both also publish turn,
  tool_called and tool_result events): the marginal cost of making a turn's call an MCP
  call, with events, spans and the model's round trip cancelled out.
"""

from __future__ import annotations

import gc
import itertools
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from mcp import Client, StdioServerParameters, stdio_client
from nexus_events.contract.streams import ensure_streams
from nexus_events.events.runs import RunCompleted, RunConfig
from nexus_events.events.specs import McpServerSpec, Permissions
from nexus_events.transport.bus import Bus, BusSettings
from nexus_runner.app import execute_run
from nexus_runner.config import RunnerSettings
from nexus_runner.git import Author, Git
from nexus_runner.tools import ToolContext, ToolRegistry
from nexus_runner.tools.mcp import McpTools
from nexus_runner.workspace import Workspace

from tests.fakes.openai_server import FakeOpenAI, Reply, Step, ToolCall

FAKE = Path(__file__).resolve().parents[1] / "tests" / "fakes" / "mcp_server.py"
# -P: the script's directory (tests/fakes has an http.py) must not shadow the stdlib.
ARGV = [sys.executable, "-P", str(FAKE)]
CALLS = 300
TURNS = 30
ROUNDS = 3
ECHO = "mcp_fake__echo"


def _spec() -> McpServerSpec:
    return McpServerSpec(
        name="fake", command=ARGV[0], args=ARGV[1:], tools=["echo"], auto_approve=["echo"]
    )


async def _direct(calls: int, workspace: Path) -> float:
    params = StdioServerParameters(command=ARGV[0], args=ARGV[1:], cwd=workspace)
    with (workspace / "direct.stderr").open("w") as errlog:
        async with Client(stdio_client(params, errlog=errlog), mode="legacy") as client:
            await client.call_tool("echo", {"text": "warm"})
            started = time.perf_counter()
            for n in range(calls):
                result = await client.call_tool("echo", {"text": str(n)})
                assert not result.is_error
            return (time.perf_counter() - started) / calls


async def _registry(calls: int, workspace: Path) -> float:
    settings = RunnerSettings(workspace_root=workspace)
    ws = Workspace(workspace)
    ctx = ToolContext(
        workspace=ws, git=Git(ws.root, Author("b", "b@x")), shell_timeout=30, output_cap=20_000
    )
    mcp = await McpTools.start([_spec()], settings, workspace)
    try:
        registry = ToolRegistry([], Permissions(), ctx, mcp)
        await registry.execute(registry.decide(ECHO, '{"text": "warm"}'))
        started = time.perf_counter()
        for n in range(calls):
            decision = registry.decide(ECHO, f'{{"text": "{n}"}}')
            assert decision.action == "run", decision
            outcome = await registry.execute(decision)
            assert outcome.ok, outcome
        return (time.perf_counter() - started) / calls
    finally:
        await mcp.close()


def _script(turns: int, tool: str) -> Any:
    counter = itertools.count(1)

    def step(body: dict[str, Any]) -> Step:
        n = next(counter)
        if n >= turns:
            return Reply(tool_calls=(ToolCall("finish", {"summary": "done"}),))
        args = {"text": str(n)} if tool == ECHO else {"pattern": f"*{n}"}
        return Reply(tool_calls=(ToolCall(tool, args),))

    return step


async def _run(nats_url: str, turns: int, tool: str) -> float:
    bus = await Bus.connect(BusSettings(url=nats_url, name="bench-mcp"), source="runner")
    await ensure_streams(bus.js)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            settings = RunnerSettings(
                workspace_root=Path(tmp),
                stuck_idle_turns=turns + 10,
                heartbeat_interval=1.0,
                budget_reservations="off",  # the runner alone: no spend service
            )
            async with FakeOpenAI(default=_script(turns, tool)) as llm:
                config = RunConfig.model_validate(
                    {
                        "run_id": f"bench-{uuid.uuid4().hex[:8]}",
                        "agent_id": "bench",
                        "system_prompt": "bench",
                        "model": {"name": "m", "base_url": llm.base_url},
                        "tools": ["list_files", "finish"],
                        "mcp_servers": [_spec().model_dump()],
                        "budgets": {"max_turns": turns + 10},
                    }
                )
                # Both kinds of run start the server: only the calls differ.
                started = time.perf_counter()
                terminal = await execute_run(config, settings, bus)
                elapsed = time.perf_counter() - started
    finally:
        await bus.close()
    assert isinstance(terminal, RunCompleted), terminal
    return elapsed / turns


async def run(nats_url: str) -> list[tuple[str, float, str, float]]:
    samples: dict[str, list[float]] = {"direct": [], "registry": [], "mcp": [], "builtin": []}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        await _direct(20, root)  # warm up imports and the server's start
        await _run(nats_url, 5, ECHO)
        for _ in range(ROUNDS):
            gc.collect()
            samples["direct"].append(await _direct(CALLS, root))
            gc.collect()
            samples["registry"].append(await _registry(CALLS, root))
            gc.collect()
            samples["mcp"].append(await _run(nats_url, TURNS, ECHO))
            gc.collect()
            samples["builtin"].append(await _run(nats_url, TURNS, "list_files"))
    direct, registry, mcp_turn, builtin_turn = (
        statistics.median(samples[k]) * 1e6 for k in samples
    )
    in_run = mcp_turn - builtin_turn
    return [
        ("direct mcp client call_tool, us/call", direct, "", 0.0),
        ("runner tool path (decide + execute), us/call", registry, "direct", registry / direct),
        ("runner tool path overhead beyond direct, us/call", registry - direct, "", 0.0),
        ("nexus run, turn with an MCP call, us/turn", mcp_turn, "", 0.0),
        ("nexus run, turn with list_files, us/turn", builtin_turn, "", 0.0),
        ("MCP call in a run (turn minus list_files turn), us", in_run, "direct", in_run / direct),
    ]  # fmt: skip
