"""MCP tool annotations through the guard, with the fake stdio MCP server in a real run."""

from __future__ import annotations

from nexus_events.events.runs import ApprovalRequested, RunCompleted, ToolCalled, ToolResult
from nexus_events.transport.bus import Bus
from tests.fakes.openai_server import FakeOpenAI, Reply

from nexus_runner.app import execute_run
from nexus_runner.config import RunnerSettings

from .support import make_config, run_events
from .test_mcp import ECHO, finish, mcp_settings, server, tc

__all__ = ["mcp_settings"]  # the fixture, shared with test_mcp


async def test_read_only_runs_destructive_asks_even_if_auto_approved(
    bus: Bus, runner_bus: Bus, mcp_settings: RunnerSettings
) -> None:
    settings = mcp_settings.model_copy(update={"approval_timeout": 0.3})  # nobody answers
    script = [
        Reply(tool_calls=(tc("mcp_fake__lookup", word="guard"),)),
        Reply(tool_calls=(tc(ECHO, text="hi"),)),
        Reply(tool_calls=(tc("mcp_fake__wipe"),)),
        finish(),
    ]
    mcp = server(tools=["echo", "lookup", "wipe"], auto_approve=["wipe"])
    async with FakeOpenAI(script) as llm:
        config = make_config(
            llm.base_url, mcp_servers=[mcp], permissions={"auto_approve": "curated"}
        )
        terminal = await execute_run(config, settings, runner_bus)
    assert isinstance(terminal, RunCompleted), terminal
    events = await run_events(bus, config.run_id)
    called = {e.tool: e for e in events if isinstance(e, ToolCalled)}
    verdicts = {t: (e.guard.decision if e.guard else None) for t, e in called.items()}
    assert verdicts["mcp_fake__lookup"] == "allow"  # readOnlyHint: no approval
    assert verdicts[ECHO] == "ask"  # not annotated, not listed
    assert verdicts["mcp_fake__wipe"] == "ask"  # destructiveHint beats auto_approve
    asked = [e.tool for e in events if isinstance(e, ApprovalRequested)]
    assert asked == [ECHO, "mcp_fake__wipe"]
    results = {e.tool: e for e in events if isinstance(e, ToolResult)}
    assert results["mcp_fake__lookup"].output == "guard: a word"
    assert "wiped" not in results["mcp_fake__wipe"].output
