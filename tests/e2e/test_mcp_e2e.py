"""Nexus as an MCP server (issue 26), driven by the SDK's own client against the dev stack.

stdio: `nexus mcp serve` as the subprocess an IDE starts; HTTP: `nexus mcp serve --http` with a
tokens file. The runs use the offline model (`[offline-model:chat]`, `[offline-model:approval]`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import httpx2
import pytest
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPDeprecationWarning
from mcp.shared.subscriptions import ResourceUpdated
from mcp_types import CallToolResult, ResourceUpdatedNotification, TextResourceContents
from nexus_cli.mcp.auth import new_token
from nexus_testing import eventually, eventually_blocking

from tests.e2e.conftest import RUN_WAIT, Stack

# Generous: the first test may also start the shared stack on a busy machine.
pytestmark = pytest.mark.timeout(240)

CHAT = """\
id: mcp-chat
role: custom
description: Answers in one turn.
model: {name: offline-chat}
system_prompt: Answer briefly. [offline-model:chat]
tools: []
"""
GATE = """\
id: mcp-gate
role: custom
description: Runs one shell command, only with a human's approval.
model: {name: offline-approval}
system_prompt: Run the command you are asked to run. [offline-model:approval]
tools: [run_shell]
permissions:
  approval_required_tools: [run_shell]
"""


@pytest.fixture(scope="module")
def agents(stack: Stack, tmp_path_factory: pytest.TempPathFactory) -> None:
    folder = tmp_path_factory.mktemp("mcp-agents")
    (folder / "chat.yaml").write_text(CHAT)
    (folder / "gate.yaml").write_text(GATE)
    applied = stack.nexus("agents", "apply", "-f", str(folder))
    assert applied.code == 0, applied.stderr


def _stdio(stack: Stack, **options: Any) -> Client:
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "nexus_cli", "mcp", "serve"],
        env=stack.env,
        cwd=str(stack.cwd),
    )
    return Client(params, read_timeout_seconds=60, **options)


def _text(result: CallToolResult) -> str:
    return "".join(getattr(c, "text", "") for c in result.content)


def _data(result: CallToolResult) -> dict[str, Any]:
    assert not result.is_error, _text(result)
    data: dict[str, Any] = json.loads(_text(result))
    return data


def _one_line_error(result: CallToolResult) -> str:
    assert result.is_error, _text(result)
    text = _text(result)
    assert text
    assert "\n" not in text, text
    assert "Traceback" not in text, text
    return text


async def _resource(client: Client, uri: str) -> dict[str, Any]:
    read = await client.read_resource(uri)
    content = read.contents[0]
    assert isinstance(content, TextResourceContents)
    data: dict[str, Any] = json.loads(content.text)
    return data


async def _pending_approval(client: Client, run_id: str) -> str:
    async def approvals() -> list[dict[str, Any]]:
        listed = await client.call_tool("list_approvals", {"run_id": run_id})
        # Until core has projected the new run, it is "no run": ask again.
        rows: list[dict[str, Any]] = [] if listed.is_error else _data(listed)["approvals"]
        return rows

    rows = await eventually(
        approvals, within=RUN_WAIT, interval=0.3, what=f"run {run_id} asking for an approval"
    )
    approval: str = rows[0]["approval_id"]
    return approval


@pytest.mark.usefixtures("agents")
async def test_stdio_start_follow_read_subscribe_approve(stack: Stack) -> None:
    async with _stdio(stack) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        get = tools["get_run"].annotations
        cancel = tools["cancel_run"].annotations
        start = tools["start_run"].annotations
        assert get is not None
        assert cancel is not None
        assert start is not None
        assert get.read_only_hint is True
        assert (cancel.read_only_hint, cancel.destructive_hint) == (False, True)
        assert (start.read_only_hint, start.destructive_hint) == (False, False)

        # Start a run and follow it to its end: a progress notification per run event.
        run_id = _data(
            await client.call_tool("start_run", {"agent": "mcp-chat", "input": "say hello"})
        )["run_id"]
        progress: list[tuple[float, str | None]] = []

        async def on_progress(value: float, total: float | None, message: str | None) -> None:
            progress.append((value, message))

        followed = await client.call_tool(
            "follow_run",
            {"run_id": run_id, "timeout_seconds": RUN_WAIT},
            progress_callback=on_progress,
            read_timeout_seconds=RUN_WAIT + 10,
        )
        final = _data(followed)
        assert final["status"] == "completed", final
        assert len(progress) >= 3, progress  # requested, started ..., completed
        assert [v for v, _ in progress] == sorted(v for v, _ in progress)
        assert any("requested" in (m or "") for _, m in progress), progress
        assert "completed" in (progress[-1][1] or ""), progress

        view = await _resource(client, f"nexus://runs/{run_id}")
        assert view["run"]["status"] == "completed"
        assert view["run"]["requested_by"]  # the person running the stdio server
        assert view["recent_events"][-1]["event"] == "completed"

        # A gated tool: subscribe to the run, approve, and get updates until it has ended.
        gated = _data(await client.call_tool("start_run", {"agent": "mcp-gate", "input": "go"}))
        gated_id = gated["run_id"]
        approval = await _pending_approval(client, gated_id)
        uri = f"nexus://runs/{gated_id}"
        async with client.listen(resource_subscriptions=[uri]) as sub:
            answered = await client.call_tool(
                "answer_approval",
                {"run_id": gated_id, "approval_id": approval, "decision": "approve"},
            )
            assert _data(answered)["decision"] == "approve"
            updates = 0

            async def until_ended() -> dict[str, Any]:
                nonlocal updates
                async for event in sub:
                    assert isinstance(event, ResourceUpdated)
                    assert event.uri == uri
                    updates += 1
                    seen = await _resource(client, uri)
                    if seen["run"]["status"] == "completed":
                        return seen
                raise AssertionError("the subscription ended before the run did")

            ended = await asyncio.wait_for(until_ended(), RUN_WAIT)
        assert updates >= 1
        assert ended["run"]["result"]["summary"] == "The approved command ran."
        # Answered twice: the loser is told, in one line, who decided.
        again = await client.call_tool(
            "answer_approval", {"run_id": gated_id, "approval_id": approval, "decision": "deny"}
        )
        assert "already decided" in _one_line_error(again)


@pytest.mark.usefixtures("agents")
async def test_stdio_bad_input_is_one_line_and_the_server_stays_up(stack: Stack) -> None:
    """On the 2025 protocol (the handshake, resources/subscribe), as many clients still are."""
    board_updated = asyncio.Event()

    async def on_message(message: Any) -> None:
        if isinstance(message, ResourceUpdatedNotification):
            assert message.params.uri == "nexus://board"
            board_updated.set()

    async with _stdio(stack, mode="legacy", message_handler=on_message) as client:
        with pytest.warns(MCPDeprecationWarning):  # the SDK's note: 2026 clients listen
            await client.session.subscribe_resource("nexus://board")
        unknown = await client.call_tool("drop_database", {})
        assert "unknown tool" in _one_line_error(unknown)
        mistyped = await client.call_tool("start_run", {"agent": {"id": 5}})
        assert "agent" in _one_line_error(mistyped)
        huge = await client.call_tool("start_run", {"agent": "mcp-chat", "input": "x" * 70_000})
        assert "limit" in _one_line_error(huge)
        missing = await client.call_tool("get_run", {"run_id": "run_doesnotexist"})
        assert "no run 'run_doesnotexist'" in _one_line_error(missing)
        bad_id = await client.call_tool("follow_run", {"run_id": "not a run id!"})
        assert "run id" in _one_line_error(bad_id)
        cancel = await client.call_tool("cancel_run", {"run_id": "run_doesnotexist"})
        assert "no run" in _one_line_error(cancel)
        secret = await client.call_tool(
            "add_memory", {"text": "hello", "scope": "no-such-scope-kind:x"}
        )
        assert "scope" in _one_line_error(secret)
        # Still serving; the board's subscribers hear of a new run.
        agents = _data(await client.call_tool("list_agents", {}))
        assert any(a["definition"]["id"] == "mcp-chat" for a in agents["agents"]), agents
        _data(await client.call_tool("start_run", {"agent": "mcp-chat", "input": "hi"}))
        await asyncio.wait_for(board_updated.wait(), 30)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@pytest.fixture
def http_server(stack: Stack, tmp_path: Path) -> Iterator[tuple[str, dict[str, str]]]:
    """`nexus mcp serve --http` with a read and an operate token; (url, {scope: token})."""
    read_token, read_entry = new_token("ide-read", "read")
    op_token, op_entry = new_token("ide-operate", "operate")
    entries = [*json_yaml(read_entry), *json_yaml(op_entry)]
    tokens = tmp_path / "tokens.yaml"
    tokens.write_text(json.dumps({"tokens": entries}))  # JSON is YAML
    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "nexus_cli", "mcp", "serve", "--http", "--port", str(port)],
        env={**stack.env, "NEXUS_MCP_TOKENS_FILE": str(tokens)},
        cwd=stack.cwd,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    base = f"http://127.0.0.1:{port}"
    try:

        def healthy() -> bool:
            assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
            with contextlib.suppress(httpx.HTTPError):
                return httpx.get(f"{base}/healthz", timeout=1).status_code == 200
            return False

        eventually_blocking(healthy, within=30, interval=0.2, what="the MCP server healthy")
        yield f"{base}/mcp", {"read": read_token, "operate": op_token}
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if proc.stderr is not None:
            proc.stderr.close()


def json_yaml(text: str) -> list[dict[str, Any]]:
    import yaml

    entries: list[dict[str, Any]] = yaml.safe_load(text)["tokens"]
    return entries


@contextlib.asynccontextmanager
async def _http(url: str, token: str) -> AsyncIterator[Client]:
    http = httpx2.AsyncClient(
        headers={"Authorization": f"Bearer {token}"}, timeout=httpx2.Timeout(30, read=120)
    )
    async with http, Client(streamable_http_client(url, http_client=http)) as client:
        yield client


@pytest.mark.usefixtures("agents")
async def test_http_tokens_and_scopes(http_server: tuple[str, dict[str, str]]) -> None:
    url, tokens = http_server
    hello = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
    headers = {"Accept": "application/json, text/event-stream"}
    async with httpx.AsyncClient() as http:
        missing = await http.post(url, json=hello, headers=headers)
        wrong = await http.post(url, json=hello, headers={**headers, "Authorization": "Bearer no"})
    assert missing.status_code == 401
    assert "missing bearer token" in missing.json()["error"]
    assert wrong.status_code == 401
    assert wrong.json() == {"error": "invalid bearer token"}

    async with _http(url, tokens["read"]) as reader:
        agents = _data(await reader.call_tool("list_agents", {}))
        assert any(a["definition"]["id"] == "mcp-chat" for a in agents["agents"])
        refused = await reader.call_tool("start_run", {"agent": "mcp-chat"})
        assert _one_line_error(refused) == "scope read may not call start_run (needs operate)"

    async with _http(url, tokens["operate"]) as operator:
        started = _data(await operator.call_tool("start_run", {"agent": "mcp-chat"}))
        run = _data(await operator.call_tool("get_run", {"run_id": started["run_id"]}))
        assert run["run"]["requested_by"] == "mcp:ide-operate"
        # Progress over HTTP too (the call's SSE stream), to the run's end.
        messages: list[str | None] = []

        async def on_progress(value: float, total: float | None, message: str | None) -> None:
            messages.append(message)

        final = await operator.call_tool(
            "follow_run",
            {"run_id": started["run_id"], "timeout_seconds": RUN_WAIT},
            progress_callback=on_progress,
            read_timeout_seconds=RUN_WAIT + 10,
        )
        assert _data(final)["status"] == "completed"
        assert len(messages) >= 3, messages
        assert "completed" in (messages[-1] or ""), messages
