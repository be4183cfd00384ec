"""A runner's cold start loads no MCP client: only a run with MCP servers imports it."""

from __future__ import annotations

import json
import subprocess
import sys


def _modules_after(code: str) -> set[str]:
    probe = f"{code}\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))"
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=120
    )
    return set(json.loads(done.stdout.splitlines()[-1]))


def test_the_runner_is_ready_for_a_config_without_the_mcp_client() -> None:
    loaded = _modules_after(
        "import nexus_runner.app\n"
        "from nexus_runner.config import RunnerSettings\n"
        "RunnerSettings()\n"
    )
    assert "nexus_runner.tools.mcp" in loaded  # the registry's MCP half is there, its client not
    assert sorted(name for name in ("mcp", "mcp.client", "mcp.types") if name in loaded) == []


def test_a_tool_result_is_read_before_any_server_started() -> None:
    # result_text binds the client's types itself: nothing else has loaded them here.
    _modules_after(
        "from mcp import types\n"
        "from nexus_runner.tools.mcp import result_text\n"
        "text = types.TextContent(type='text', text='hi')\n"
        "shown = result_text(types.CallToolResult(content=[text]))\n"
        "assert shown == 'hi', shown\n"
    )
