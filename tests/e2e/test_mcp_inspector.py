"""A third-party MCP client drives `nexus mcp serve`: the MCP Inspector's CLI mode, from the
npm registry, against the dev stack (real NATS, PostgreSQL, core), over stdio and over
streamable HTTP with a bearer token (docs/mcp.md).

The Inspector is pinned: its CLI flags change between major versions, and an unpinned `npx`
picks whichever release the local Node's `engines` allows. The first `npx -y` downloads it
(about 10-15 s with a cold npm cache here, ~1 s per call once cached); the warm-up fixture gives
that download its own generous timeout, so a cold cache costs time, never a flaky call.
Skipped only when Node.js/npx is not installed.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from nexus_testing import eventually_blocking, free_port

from tests.e2e.conftest import Stack

INSPECTOR = "@modelcontextprotocol/inspector@2.12.0"
# The first `npx -y` of a cold npm cache downloads the Inspector and its dependencies.
DOWNLOAD_TIMEOUT = 600.0
CALL_TIMEOUT = 90.0
TOOL_IS_ERROR = 5  # the Inspector CLI's exit code for a tool result with isError
AUTH_REQUIRED = 3  # ... and for a server that wants authorization it was not given
AGENT = "inspector-probe"
AGENT_YAML = f"""\
id: {AGENT}
role: custom
description: Listed by the MCP Inspector through `nexus mcp serve`.
model: {{name: offline-chat}}
system_prompt: You greet and finish. [offline-model:chat]
tools: [finish]
"""
# The tools of the interface (docs/mcp.md), each with its scope's annotations.
READ_TOOLS = {
    "list_agents",
    "list_flows",
    "get_run",
    "follow_run",
    "board",
    "list_approvals",
    "search_memory",
    "list_dead_letters",
    "usage",
}
OPERATE_TOOLS = {
    "start_run",
    "start_flow",
    "cancel_run",
    "wake_run",
    "answer_approval",
    "add_memory",
}
NPX = shutil.which("npx")

pytestmark = [
    pytest.mark.timeout(DOWNLOAD_TIMEOUT + 300),
    pytest.mark.skipif(
        NPX is None or shutil.which("node") is None,
        reason="Node.js/npx is not installed: the MCP Inspector is an npm package"
        " (install Node.js 20 or newer to run this third-party client test)",
    ),
]


@dataclass
class Inspector:
    """`npx -y <INSPECTOR> --cli ...` with a private catalog file and quiet npm."""

    env: dict[str, str]

    def run(self, *args: str, timeout: float = CALL_TIMEOUT) -> subprocess.CompletedProcess[str]:
        assert NPX is not None
        return subprocess.run(
            [NPX, "-y", INSPECTOR, "--cli", *args],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
            check=False,
        )

    def call(self, *args: str, tool_error: bool = False) -> dict[str, Any]:
        """The result the Inspector prints for one method: it exits 0, or 5 for a tool's
        result with isError (then the result comes first on stdout, its own line last)."""
        done = self.run(*args)
        expected = TOOL_IS_ERROR if tool_error else 0
        assert done.returncode == expected, f"exit {done.returncode}: {done.stdout}{done.stderr}"
        result: dict[str, Any] = json.JSONDecoder().raw_decode(done.stdout.lstrip())[0]
        return result


@pytest.fixture(scope="module")
def inspector(tmp_path_factory: pytest.TempPathFactory) -> Inspector:
    home = tmp_path_factory.mktemp("inspector")
    env = {
        **os.environ,
        # The Inspector writes its server catalog under ~ unless told where.
        "MCP_CATALOG_PATH": str(home / "mcp.json"),
        "npm_config_update_notifier": "false",
        "npm_config_fund": "false",
        "npm_config_audit": "false",
        "NO_COLOR": "1",
    }
    tool = Inspector(env)
    # The download happens here, once, whatever the npm cache holds.
    started = time.monotonic()
    warm = tool.run("--help", timeout=DOWNLOAD_TIMEOUT)
    assert warm.returncode == 0, warm.stdout + warm.stderr
    assert "--method" in warm.stdout
    print(f"MCP Inspector ready in {time.monotonic() - started:.1f} s ({INSPECTOR})")
    return tool


@pytest.fixture(scope="module")
def probe_agent(stack: Stack, tmp_path_factory: pytest.TempPathFactory) -> str:
    path = tmp_path_factory.mktemp("agent") / "agent.yaml"
    path.write_text(AGENT_YAML)
    applied = stack.nexus("agents", "apply", "-f", str(path))
    assert applied.code == 0, applied.stderr
    return AGENT


def _stdio_server(stack: Stack) -> list[str]:
    """The command an IDE starts: `nexus mcp serve`, with what tells it where the stack is
    (an MCP client gives a stdio server only the variables it is told, not its own)."""
    nexus = str(Path(sys.executable).parent / "nexus")
    passed = [
        f"{k}={v}"
        for k, v in stack.env.items()
        if k.startswith("NEXUS_") or k in ("OTEL_SDK_DISABLED",)
    ]
    return [*(x for kv in passed for x in ("-e", kv)), nexus, "mcp", "serve"]


def _text(result: dict[str, Any]) -> str:
    return "\n".join(c["text"] for c in result.get("content", []) if c.get("type") == "text")


def test_the_inspector_lists_and_calls_tools_over_stdio(
    stack: Stack, inspector: Inspector, probe_agent: str
) -> None:
    server = _stdio_server(stack)
    listed = inspector.call(*server, "--method", "tools/list")
    tools = {t["name"]: t for t in listed["tools"]}
    assert set(tools) == READ_TOOLS | OPERATE_TOOLS
    for name in READ_TOOLS:
        assert tools[name]["annotations"]["readOnlyHint"] is True, name
    for name in OPERATE_TOOLS:
        assert tools[name]["annotations"].get("readOnlyHint") is not True, name
    assert tools["cancel_run"]["annotations"]["destructiveHint"] is True
    assert tools["start_run"]["annotations"]["destructiveHint"] is False
    assert "run_id" in tools["get_run"]["inputSchema"]["properties"]

    called = inspector.call(*server, "--method", "tools/call", "--tool-name", "list_agents")
    assert called.get("isError") is not True, called
    assert probe_agent in json.dumps(called)


@pytest.fixture
def http_server(stack: Stack, tmp_path: Path) -> Iterator[tuple[str, str]]:
    """`nexus mcp serve --http` with one `read` token; yields (its /mcp URL, the token)."""
    token = secrets.token_urlsafe(32)
    tokens = tmp_path / "tokens.yaml"
    entry = {
        "name": "inspector",
        "sha256": hashlib.sha256(token.encode()).hexdigest(),
        "scope": "read",
    }
    tokens.write_text(json.dumps({"tokens": [entry]}))  # JSON is YAML
    port = free_port()
    nexus = str(Path(sys.executable).parent / "nexus")
    log = (tmp_path / "mcp.log").open("w")
    proc = subprocess.Popen(
        [nexus, "mcp", "serve", "--http", "--host", "127.0.0.1", "--port", str(port),
         "--tokens", str(tokens)],
        env=stack.env, cwd=stack.cwd, stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    try:

        def healthy() -> bool:
            assert proc.poll() is None, (tmp_path / "mcp.log").read_text()
            try:
                with urllib.request.urlopen(f"{base}/healthz", timeout=2) as resp:
                    return bool(resp.status == 200)
            except (OSError, urllib.error.URLError):
                return False

        eventually_blocking(healthy, within=60, interval=0.3, what="/healthz answering 200")
        yield f"{base}/mcp", token
    finally:
        proc.terminate()
        try:
            proc.wait(20)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)
            log.close()


def test_the_inspector_over_http_with_a_read_token(
    inspector: Inspector, probe_agent: str, http_server: tuple[str, str]
) -> None:
    url, token = http_server
    auth = ("--header", f"Authorization: Bearer {token}")
    called = inspector.call(url, *auth, "--method", "tools/call", "--tool-name", "list_agents")
    assert called.get("isError") is not True, called
    assert probe_agent in json.dumps(called)

    # A read token may not start a run: a tool error of one line, not a protocol failure.
    refused = inspector.call(
        url, *auth, "--method", "tools/call", "--tool-name", "start_run",
        "--tool-arg", f"agent={probe_agent}", "--tool-arg", "input=hello", tool_error=True,
    )  # fmt: skip
    assert refused["isError"] is True
    assert _text(refused) == "scope read may not call start_run (needs operate)"

    # A run that does not exist: one line naming it; the server stays up for the next call.
    missing = inspector.call(
        url, *auth, "--method", "tools/call", "--tool-name", "get_run",
        "--tool-arg", "run_id=run-does-not-exist", tool_error=True,
    )  # fmt: skip
    assert missing["isError"] is True
    assert "run-does-not-exist" in _text(missing)
    assert "\n" not in _text(missing).strip()
    assert "Traceback" not in json.dumps(missing)
    again = inspector.call(url, *auth, "--method", "tools/list")
    assert {t["name"] for t in again["tools"]} == READ_TOOLS | OPERATE_TOOLS
    # The prompt, with its argument filled in.
    prompt = inspector.call(
        url, *auth, "--method", "prompts/get", "--prompt-name", "hand_to_team",
        "--prompt-args", "task=fix the flaky test",
    )  # fmt: skip
    assert "fix the flaky test" in json.dumps(prompt)
    assert "list_agents" in json.dumps(prompt)

    # No token and a wrong one: refused before any MCP message (HTTP 401); the Inspector
    # reports that authorization is required and exits non-zero.
    for header in ((), ("--header", "Authorization: Bearer not-the-token")):
        denied = inspector.run(url, *header, "--stored-auth-only", "--method", "tools/list")
        said = denied.stdout + denied.stderr
        assert denied.returncode == AUTH_REQUIRED, said
        assert '"auth_required"' in said
        assert "bearer token" in said  # the server's one-line reason, passed through
