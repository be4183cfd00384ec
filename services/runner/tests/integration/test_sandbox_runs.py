"""A whole run on real NATS with sandboxed JavaScript tools: one works on the workspace, one
spins past its wall time and one lacks a token; each result is recorded and the run goes on
to finish."""

from __future__ import annotations

import asyncio
import time

from nexus_events.events.runs import ApprovalDecided, ApprovalRequested, RunCompleted, ToolResult
from nexus_events.transport.bus import Bus
from tests.fakes.openai_server import FakeOpenAI, Reply, ToolCall

from nexus_runner.app import execute_run
from nexus_runner.config import RunnerSettings

from .support import make_config, run_events

COPY = """async function run(args) {
  nexus.workspace.write("out/" + args.name, nexus.workspace.read(args.name).toUpperCase());
  return "copied " + args.name;
}"""
TOOLS = [
    {"name": "shout", "description": "upper-case a file into out/", "source": COPY,
     "parameters": {"type": "object", "properties": {"name": {"type": "string"}}},
     "capabilities": ["workspace:read:*.txt", "workspace:write:out/*"]},
    {"name": "spin", "description": "never ends", "source": "async function run() { for (;;) {} }",
     "limits": {"wall_seconds": 0.5}},
    {"name": "ask", "description": "asks a human first",
     "source": "async function run() { return (await nexus.approve('may I?')) ? 'yes' : 'no' }"},
    {"name": "peek", "description": "reads without a token",
     "source": "async function run() { return nexus.workspace.read('notes.txt') }"},
]  # fmt: skip


def step(tool: str, **args: object) -> Reply:
    return Reply(tool_calls=(ToolCall(tool, args),))


async def test_a_run_uses_sandboxed_tools_and_goes_on_after_each_failure(
    bus: Bus, runner_bus: Bus, settings: RunnerSettings
) -> None:
    script = [
        step("write_file", path="notes.txt", content="hello"),
        step("shout", name="notes.txt"),
        step("spin"),
        step("peek"),
        step("ask"),
        step("finish", summary="done"),
    ]
    # Nobody answers: the sandboxed tool's approval expires and it goes on with a "no".
    settings = settings.model_copy(update={"approval_timeout": 0.3})
    async with FakeOpenAI(script) as llm:
        config = make_config(llm.base_url, sandbox_tools=TOOLS)
        started = time.monotonic()
        terminal = await asyncio.wait_for(execute_run(config, settings, runner_bus), 90)
        seconds = time.monotonic() - started
    assert isinstance(terminal, RunCompleted), terminal
    offered = {t["function"]["name"] for t in llm.requests[0]["tools"]}
    assert {"shout", "spin", "peek"} <= offered
    events = await run_events(bus, config.run_id)
    results = {e.tool: (e.ok, e.output) for e in events if isinstance(e, ToolResult)}
    assert results["shout"] == (True, "copied notes.txt")
    assert results["spin"] == (False, "spin: wall time limit of 0.5s exceeded")
    assert results["peek"] == (
        False,
        "peek: missing capability workspace:read:notes.txt (declare a token granting it)",
    )
    assert results["ask"] == (True, "no")
    asked = [e for e in events if isinstance(e, ApprovalRequested)]
    assert [(a.tool, a.why) for a in asked] == [("ask", "may I?")]
    assert [e.decision for e in events if isinstance(e, ApprovalDecided)] == ["expired"]
    assert seconds < 30
