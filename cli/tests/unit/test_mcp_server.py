"""The MCP server without NATS: tokens, the HTTP guard, and the server in-process through the
SDK's own client (tool list and annotations, one-line errors, scopes, the prompt)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest
from mcp import Client
from mcp_types import CallToolResult
from nexus_events.runtime.bearer_tokens import digest
from starlette.types import Receive, Scope, Send
from tests.support.cli import invoke as nexus

from nexus_cli.client import Session
from nexus_cli.errors import CliError
from nexus_cli.mcp.auth import Identity, Tokens, load_tokens, new_token
from nexus_cli.mcp.auth import Scope as McpScope
from nexus_cli.mcp.server import MAX_ARGUMENT_BYTES, build_server
from nexus_cli.mcp.state import Nexus
from nexus_cli.mcp.web import BearerAuth
from nexus_cli.target import Target

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


def _entry(name: str, token: str, scope: str, **extra: Any) -> dict[str, Any]:
    return {"name": name, "sha256": digest(token), "scope": scope, **extra}


def _tokens_file(tmp_path: Path, entries: list[dict[str, Any]]) -> Path:
    path = tmp_path / "tokens.yaml"
    path.write_text(json.dumps({"tokens": entries}))
    return path


def test_a_token_resolves_to_its_identity_and_nothing_else(tmp_path: Path) -> None:
    path = _tokens_file(
        tmp_path,
        [_entry("ro", "t-read", "read"), _entry("op", "t-op", "operate", nats_user="mcp-op")],
    )
    tokens = Tokens(load_tokens(path))
    ro = tokens.identify("t-read")
    assert ro == Identity(name="ro", scope=McpScope.READ, requested_by="mcp:ro")
    assert not ro.may(McpScope.OPERATE)
    assert ro.may(McpScope.READ)
    op = tokens.from_header("Bearer t-op")
    assert op is not None
    assert op.scope is McpScope.OPERATE
    assert op.nats_user == "mcp-op"
    assert tokens.identify("t-rea") is None
    assert tokens.from_header("Basic t-op") is None
    assert tokens.from_header("Bearer ") is None
    assert tokens.from_header(None) is None


def test_new_token_prints_an_entry_that_accepts_it(tmp_path: Path) -> None:
    token, entry = new_token("alice-laptop", "operate")
    assert token not in entry  # only its digest is stored
    path = tmp_path / "tokens.yaml"
    path.write_text(entry)
    found = Tokens(load_tokens(path)).identify(token)
    assert found is not None
    assert found.requested_by == "mcp:alice-laptop"


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("tokens: [", "is not YAML"),
        ('{"tokens": [{"name": "a", "sha256": "xyz", "scope": "read"}]}', "tokens.0.sha256"),
        ('{"tokens": [{"name": "a", "sha256": "' + "0" * 64 + '", "scope": "root"}]}', "scope"),
        (
            json.dumps({"tokens": [_entry("a", "x", "read"), _entry("a", "y", "read")]}),
            "unique",
        ),
        (
            json.dumps(
                {"tokens": [_entry("a", "x", "read", nats_user="u", nats_password_env="NOPE_X")]}
            ),
            "NOPE_X is not set",
        ),
    ],
)
def test_a_bad_tokens_file_is_one_line(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "tokens.yaml"
    path.write_text(content)
    with pytest.raises(CliError) as err:
        load_tokens(path)
    assert message in err.value.message
    assert "\n" not in err.value.message


async def test_http_guard_refuses_missing_and_wrong_tokens_but_not_healthz() -> None:
    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"in"})

    guard = BearerAuth(app, Tokens([load_entry("good")]))
    transport = httpx.ASGITransport(app=guard)
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as http:
        missing = await http.post("/mcp")
        assert missing.status_code == 401
        assert missing.json() == {"error": "missing bearer token (Authorization: Bearer <token>)"}
        wrong = await http.post("/mcp", headers={"Authorization": "Bearer bad"})
        assert wrong.status_code == 401
        assert wrong.json() == {"error": "invalid bearer token"}
        ok = await http.post("/mcp", headers={"Authorization": "Bearer good"})
        assert ok.status_code == 200
        assert (await http.get("/healthz")).status_code == 200


def load_entry(token: str) -> Any:
    from nexus_cli.mcp.auth import TokenEntry

    return TokenEntry(name="n", sha256=digest(token), scope=McpScope.READ)


def _server(scope: McpScope) -> Any:
    """The server with a connection that is never opened: these calls fail before NATS."""
    target = Target("test", "nats://127.0.0.1:1", None, None)
    who = Identity(name="tester", scope=scope, requested_by="tester")
    nexus_state = Nexus(target=target, timeout=1.0, session=Session(target, 1.0), local=who)
    server, _ = build_server(nexus_state)
    return server


def _error(result: CallToolResult) -> str:
    assert result.is_error
    text = "".join(getattr(c, "text", "") for c in result.content)
    assert text
    assert "\n" not in text
    return text


async def test_tools_and_their_annotations() -> None:
    async with Client(_server(McpScope.OPERATE)) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        assert set(tools) == READ_TOOLS | OPERATE_TOOLS
        for name in READ_TOOLS:
            hints = tools[name].annotations
            assert hints is not None
            assert hints.read_only_hint is True, name
        for name in OPERATE_TOOLS:
            hints = tools[name].annotations
            assert hints is not None
            assert hints.read_only_hint is False, name
            assert hints.destructive_hint is (name == "cancel_run"), name
        templates = {
            t.uri_template for t in (await client.list_resource_templates()).resource_templates
        }
        assert templates == {
            "nexus://runs/{run_id}",
            "nexus://agents/{agent_id}",
            "nexus://flows/{flow_id}",
        }
        assert [r.uri for r in (await client.list_resources()).resources] == ["nexus://board"]
        prompt = await client.get_prompt("hand_to_team", {"task": "fix the login bug"})
        text = prompt.messages[0].content.text  # type: ignore[union-attr]
        assert "fix the login bug" in text
        assert "list_agents" in text
        assert "start_run" in text


@pytest.mark.parametrize(
    ("tool", "arguments", "message"),
    [
        ("drop_database", {}, "unknown tool 'drop_database'"),
        ("start_run", {"agent": {"id": 5}}, "invalid arguments for start_run: agent:"),
        ("start_run", {}, "invalid arguments for start_run: agent: Field required"),
        ("follow_run", {"run_id": "r", "timeout_seconds": "soon"}, "timeout_seconds"),
        (
            "start_run",
            {"agent": "a", "input": "x" * MAX_ARGUMENT_BYTES},
            f"over the {MAX_ARGUMENT_BYTES}-byte limit",
        ),
        ("start_run", {"agent": "bad agent"}, "invalid agent id 'bad agent'"),
        ("start_run", {"agent": "a", "task": "fix it"}, "invalid task id 'fix it'"),
        ("get_run", {"run_id": "run.1"}, "invalid run id 'run.1'"),
        ("answer_approval", {"run_id": "r", "approval_id": "a", "decision": "maybe"}, "decision"),
        ("add_memory", {"text": "t", "scope": "nowhere"}, "scope"),
        ("follow_run", {"run_id": "r", "timeout_seconds": 0}, "timeout_seconds must be"),
    ],
)
async def test_bad_input_is_a_one_line_tool_error(
    tool: str, arguments: dict[str, Any], message: str
) -> None:
    async with Client(_server(McpScope.OPERATE)) as client:
        assert message in _error(await client.call_tool(tool, arguments))
        # The server is still there.
        assert len((await client.list_tools()).tools) == len(READ_TOOLS | OPERATE_TOOLS)


async def test_a_read_scope_may_not_operate() -> None:
    async with Client(_server(McpScope.READ)) as client:
        for tool in sorted(OPERATE_TOOLS):
            text = _error(await client.call_tool(tool, {}))
            assert text == f"scope read may not call {tool} (needs operate)"


def test_token_command(env: dict[str, str]) -> None:
    made = nexus(env, "mcp", "token", "--name", "ci-bot", "--scope", "operate")
    assert made.exit_code == 0, made.output
    assert "token: nxm_" in made.output
    assert "scope: operate" in made.output
    assert nexus(env, "mcp", "token", "--name", "x", "--scope", "admin").exit_code == 2
    assert nexus(env, "mcp", "token", "--name", "no spaces").exit_code == 2


def test_http_without_a_tokens_file_is_refused(env: dict[str, str]) -> None:
    result = nexus({**env, "NEXUS_NATS_URL": "nats://127.0.0.1:1"}, "mcp", "serve", "--http")
    assert result.exit_code == 2
    assert "--http needs a tokens file" in result.output


def test_which_stream_events_change_which_resource() -> None:
    from nexus_cli.mcp.resources import sources

    assert sources("nexus://runs/run_1") == [("NEXUS_RUNS", "nexus.agent.run.v1.run_1.*")]
    assert [stream for stream, _ in sources("nexus://board")] == ["NEXUS_RUNS", "NEXUS_TASKS"]
    # Honoured, never notified: nothing on a stream changes these.
    assert sources("nexus://runs/not a run") == []
    assert sources("nexus://agents/implementer") == []
    assert sources("file:///etc/passwd") == []


def test_serve_without_nats_is_one_line_and_exit_4(env: dict[str, str]) -> None:
    result = nexus({**env, "NEXUS_NATS_URL": "nats://127.0.0.1:1"}, "mcp", "serve")
    assert result.exit_code == 4
    assert "cannot reach NATS at nats://127.0.0.1:1" in result.output


def test_a_token_entry_names_the_agents_it_sees(tmp_path: Path) -> None:
    path = _tokens_file(
        tmp_path,
        [
            _entry("all", "t-all", "read"),
            _entry("plan", "t-plan", "operate", agents=["planner", "review*"]),
        ],
    )
    tokens = Tokens(load_tokens(path))
    everyone = tokens.identify("t-all")
    assert everyone is not None
    assert everyone.agents is None
    assert everyone.sees("anything")
    scoped = tokens.identify("t-plan")
    assert scoped is not None
    assert scoped.agents == ("planner", "review*")
    assert [scoped.sees(a) for a in ("planner", "reviewer", "planner2", "implementer", None)] == [
        True,
        True,
        False,
        False,
        False,
    ]


@pytest.mark.parametrize("agents", [[], ["bad agent"], ["a.b"], "planner"])
def test_a_bad_agents_list_is_one_line(tmp_path: Path, agents: Any) -> None:
    path = _tokens_file(tmp_path, [_entry("a", "x", "read", agents=agents)])
    with pytest.raises(CliError) as err:
        load_tokens(path)
    assert "agents" in err.value.message
    assert "\n" not in err.value.message


def test_token_command_with_agents(env: dict[str, str], tmp_path: Path) -> None:
    made = nexus(
        env, "mcp", "token", "--name", "ide", "--scope", "read", "--agents", "planner, review*"
    )
    assert made.exit_code == 0, made.output
    token = made.output.split("token: ", 1)[1].split()[0]
    entry = made.output.split("add to the tokens file:\n", 1)[1]
    path = tmp_path / "tokens.yaml"
    path.write_text(entry)
    found = Tokens(load_tokens(path)).identify(token)
    assert found is not None
    assert found.agents == ("planner", "review*")
    bad = nexus(env, "mcp", "token", "--name", "ide", "--agents", "plan ner")
    assert bad.exit_code == 2
    assert "invalid --agents" in bad.output
