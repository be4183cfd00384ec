"""A token scoped to agents sees and acts on their runs only: the MCP server in-process through
the SDK's own client, against a real core on a real nats-server and PostgreSQL."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx2
import pytest
import uvicorn
from mcp import Client, MCPError
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.subscriptions import ResourceUpdated
from mcp_types import CallToolResult, TextResourceContents
from nexus_core.app import CoreApp
from nexus_events.contract import subjects
from nexus_events.contract.streams import RUNS
from nexus_events.events import (
    CancelRequested,
    Column,
    RunRequested,
    RunSleeping,
    RunStarted,
    RunWakeRequested,
    TaskCreated,
)
from nexus_events.runtime.bearer_tokens import digest
from nexus_events.transport.bus import Bus
from nexus_events.transport.catalog_commands import apply_agent, apply_flow
from nexus_testing import eventually

from nexus_cli.client import Session
from nexus_cli.errors import CliError
from nexus_cli.mcp.auth import Identity, Scope, TokenEntry, Tokens
from nexus_cli.mcp.server import build_server
from nexus_cli.mcp.state import Nexus
from nexus_cli.mcp.web import BearerAuth
from nexus_cli.target import Target

AGENT = "id: {id}\nrole: {id}\nmodel: {{name: test-model}}\nsystem_prompt: You {id}.\n"
FLOW = "id: {id}\nsteps:\n  - {{id: a, kind: run, agent: {agent}}}\n"
# The other agent's run and its task input: what a planner-only token must never see.
SECRET_INPUT = "reviewer input: password hunter2"


def _text(result: CallToolResult) -> str:
    return "".join(getattr(c, "text", "") for c in result.content)


def _data(result: CallToolResult) -> dict[str, Any]:
    assert not result.is_error, _text(result)
    data: dict[str, Any] = json.loads(_text(result))
    return data


def _error(result: CallToolResult) -> str:
    assert result.is_error, _text(result)
    return _text(result)


async def _request(bus: Bus, run_id: str, agent: str, text: str) -> None:
    body = {"agent_id": agent, "task_id": "T-1", "input": text}
    await bus.js.publish(subjects.run_event(run_id, "requested"), json.dumps(body).encode())


@pytest.fixture
async def runs(core: CoreApp, bus: Bus, nats_url: str) -> None:
    """Agents planner, reviewer and implementer; one run of planner and one of reviewer on
    task T-1; flows of planner and of reviewer."""
    for agent in ("planner", "reviewer", "implementer"):
        await apply_agent(bus, AGENT.format(id=agent))
    await apply_flow(bus, FLOW.format(id="plan-flow", agent="planner"))
    await apply_flow(bus, FLOW.format(id="review-flow", agent="reviewer"))
    await eventually(core.catalog_fresh, what="catalog applied")
    await bus.publish(
        subjects.task_event("T-1", "created"), TaskCreated(title="Fix", column=Column.TODO)
    )
    await _request(bus, "run_plan", "planner", "plan it")
    await _request(bus, "run_rev", "reviewer", SECRET_INPUT)
    async with Session(Target("test", nats_url, None, None), 2.0) as s:

        async def both_known() -> bool:
            try:
                await s.get_run("run_plan")
                await s.get_run("run_rev")
            except CliError:
                return False
            board = await s.query(subjects.CORE_BOARD_GET, {})
            return bool(board["tasks"]) and len(board["tasks"][0]["past_runs"]) == 1

        await eventually(both_known, within=20, what="core knows both runs")


@asynccontextmanager
async def _client(
    nats_url: str, scope: Scope, agents: tuple[str, ...] | None
) -> AsyncIterator[Client]:
    target = Target("test", nats_url, None, None)
    who = Identity(name="tok", scope=scope, requested_by="mcp:tok", agents=agents)
    async with Session(target, 2.0, persistent=True) as s:
        server, watchers = build_server(Nexus(target=target, timeout=2.0, session=s, local=who))
        try:
            async with Client(server) as client:
                yield client
        finally:
            watchers.close()


async def _resource(client: Client, uri: str) -> str:
    read = await client.read_resource(uri)
    content = read.contents[0]
    assert isinstance(content, TextResourceContents)
    return content.text


@pytest.mark.usefixtures("runs")
async def test_a_read_token_scoped_to_planner_sees_nothing_of_reviewer(nats_url: str) -> None:
    async with _client(nats_url, Scope.READ, ("planner",)) as client:
        # Its own agent's run: there.
        assert _data(await client.call_tool("get_run", {"run_id": "run_plan"}))["run"][
            "agent_id"
        ] == ("planner")
        assert "run_plan" in await _resource(client, "nexus://runs/run_plan")
        # The other agent's run: "not found", in the words of a run that does not exist.
        hidden = _error(await client.call_tool("get_run", {"run_id": "run_rev"}))
        missing = _error(await client.call_tool("get_run", {"run_id": "run_none"}))
        assert hidden == "no run 'run_rev'"
        assert missing == "no run 'run_none'"
        followed = await client.call_tool("follow_run", {"run_id": "run_rev", "timeout_seconds": 2})
        assert _error(followed) == "no run 'run_rev'"
        approvals = await client.call_tool("list_approvals", {"run_id": "run_rev"})
        assert _error(approvals) == "no run 'run_rev'"
        with pytest.raises(MCPError) as err:
            await client.read_resource("nexus://runs/run_rev")
        assert "no run 'run_rev'" in str(err.value)
        # Lists and the board: filtered.
        agents = _data(await client.call_tool("list_agents", {}))["agents"]
        assert [a["definition"]["id"] for a in agents] == ["planner"]
        flows = _data(await client.call_tool("list_flows", {}))["flows"]
        assert [f["definition"]["id"] for f in flows] == ["plan-flow"]
        with pytest.raises(MCPError):
            await client.read_resource("nexus://agents/reviewer")
        with pytest.raises(MCPError):
            await client.read_resource("nexus://flows/review-flow")
        assert "planner" in await _resource(client, "nexus://agents/planner")
        for board in (
            json.dumps(_data(await client.call_tool("board", {}))),
            await _resource(client, "nexus://board"),
        ):
            assert "run_plan" in board
            assert "run_rev" not in board
        # Memory of other scopes, and dead letters of every agent: refused.
        memory = await client.call_tool(
            "search_memory", {"query": "password", "scope": "agent:reviewer"}
        )
        assert "outside this token's agents" in _error(memory)
        assert "outside" in _error(await client.call_tool("search_memory", {"query": "x"}))
        dlq = await client.call_tool("list_dead_letters", {})
        assert _error(dlq) == "list_dead_letters needs a token that is not scoped to agents"


@pytest.mark.usefixtures("runs")
async def test_an_unscoped_token_and_a_glob_see_the_reviewer_run(nats_url: str) -> None:
    for agents in (None, ("plan*", "rev?ewer")):
        async with _client(nats_url, Scope.READ, agents) as client:
            view = _data(await client.call_tool("get_run", {"run_id": "run_rev"}))
            assert view["run"]["agent_id"] == "reviewer"
            assert "run_rev" in await _resource(client, "nexus://board")


@pytest.mark.usefixtures("runs")
async def test_an_operate_token_scoped_to_planner_starts_and_stops_only_planner(
    nats_url: str, bus: Bus
) -> None:
    async with _client(nats_url, Scope.OPERATE, ("planner",)) as client:
        refused = await client.call_tool("start_run", {"agent": "implementer", "input": "x"})
        assert _error(refused) == "agent 'implementer' is outside this token's agents"
        flow = await client.call_tool("start_flow", {"flow": "review-flow"})
        assert _error(flow) == "no flow 'review-flow'"
        cancel = await client.call_tool("cancel_run", {"run_id": "run_rev"})
        assert _error(cancel) == "no run 'run_rev'"
        answer = await client.call_tool(
            "answer_approval", {"run_id": "run_rev", "approval_id": "apr-1", "decision": "approve"}
        )
        assert _error(answer) == "no run 'run_rev'"
        started = _data(await client.call_tool("start_run", {"agent": "planner", "input": "go"}))
        assert _data(await client.call_tool("get_run", {"run_id": started["run_id"]}))
    # Every refusal came before a publish: the only requests and cancels are the fixture's two
    # runs and the planner run this token started.
    published = [
        (d.envelope.subject, type(d.event).__name__)
        async for d in bus.replay(RUNS)
        if isinstance(d.event, RunRequested | CancelRequested)
    ]
    assert published == [
        (subjects.run_event(rid, "requested"), "RunRequested")
        for rid in ("run_plan", "run_rev", started["run_id"])
    ]


@asynccontextmanager
async def _http_server(nats_url: str, tokens: Tokens) -> AsyncIterator[str]:
    """The HTTP server as `nexus mcp serve --http` wires it, in this process; its /mcp URL."""
    target = Target("test", nats_url, None, None)
    nobody = Identity(name="anonymous", scope=Scope.READ, requested_by="mcp:anonymous")
    async with Session(target, 2.0, persistent=True) as s:
        nexus = Nexus(target=target, timeout=2.0, session=s, local=nobody, tokens=tokens)
        server, watchers = build_server(nexus)
        app = BearerAuth(server.streamable_http_app(host="127.0.0.1"), tokens)
        config = uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning", lifespan="on")
        web = uvicorn.Server(config)
        serving = asyncio.create_task(web.serve())
        try:
            await eventually(lambda: web.started, within=10, what="uvicorn started")
            port = web.servers[0].sockets[0].getsockname()[1]
            yield f"http://127.0.0.1:{port}/mcp"
        finally:
            web.should_exit = True
            await serving
            watchers.close()
            await nexus.close()


@asynccontextmanager
async def _http_client(url: str, token: str) -> AsyncIterator[Client]:
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=30)
    async with http, Client(streamable_http_client(url, http_client=http)) as client:
        yield client


@pytest.mark.usefixtures("runs")
async def test_over_http_the_bearer_token_carries_the_scope(nats_url: str) -> None:
    entries = [
        TokenEntry(name="plan", sha256=digest("t-plan"), scope=Scope.READ, agents=["planner"]),
        TokenEntry(name="all", sha256=digest("t-all"), scope=Scope.READ),
    ]
    async with _http_server(nats_url, Tokens(entries)) as url:
        async with _http_client(url, "t-plan") as planner:
            hidden = await planner.call_tool("get_run", {"run_id": "run_rev"})
            assert _error(hidden) == "no run 'run_rev'"
            with pytest.raises(MCPError):
                await planner.read_resource("nexus://runs/run_rev")
            board = await _resource(planner, "nexus://board")
            assert "run_plan" in board
            assert "run_rev" not in board
        async with _http_client(url, "t-all") as everyone:
            assert _data(await everyone.call_tool("get_run", {"run_id": "run_rev"}))
            assert "run_rev" in await _resource(everyone, "nexus://board")


@pytest.mark.usefixtures("runs")
async def test_a_scoped_subscription_to_another_agents_run_never_fires(
    nats_url: str, bus: Bus
) -> None:
    mine, theirs = "nexus://runs/run_plan", "nexus://runs/run_rev"
    async with (
        _client(nats_url, Scope.READ, ("planner",)) as client,
        client.listen(resource_subscriptions=[theirs, mine]) as sub,
    ):
        # The other run's event first: had it been watched, its update would come first.
        await bus.publish(subjects.run_event("run_rev", "started"), RunStarted())
        await bus.publish(subjects.run_event("run_plan", "started"), RunStarted())
        first = await asyncio.wait_for(anext(aiter(sub)), 15)
        assert isinstance(first, ResourceUpdated)
        assert first.uri == mine


@pytest.mark.usefixtures("runs")
async def test_wake_run_wakes_a_sleeping_run_of_its_agents_once_and_refuses_the_rest(
    nats_url: str, bus: Bus
) -> None:
    async with _client(nats_url, Scope.OPERATE, ("planner",)) as client:
        other = await client.call_tool("wake_run", {"run_id": "run_rev"})
        assert _error(other) == "no run 'run_rev'"
        awake = await client.call_tool("wake_run", {"run_id": "run_plan"})
        assert _error(awake).startswith("run run_plan is not sleeping: ")
        until = datetime.now(UTC) + timedelta(hours=1)
        await bus.publish(
            subjects.run_event("run_plan", "sleeping"),
            RunSleeping(until=until, reason="waiting for CI", attempt=1, turn=2),
        )
        seen = await eventually(
            lambda: client.call_tool("get_run", {"run_id": "run_plan"}),
            lambda r: _data(r)["run"]["status"] == "sleeping",
            within=20,
            what="core shows run_plan sleeping",
        )
        assert _data(seen)["run"]["sleep_reason"] == "waiting for CI"
        args = {"run_id": "run_plan", "reason": "CI is green"}
        woken = _data(await client.call_tool("wake_run", args))
        assert woken["wake_requested"] is True
        _data(await client.call_tool("wake_run", args))  # asked twice for one sleep
    async with _client(nats_url, Scope.READ, None) as reader:
        refused = await reader.call_tool("wake_run", {"run_id": "run_plan"})
        assert "needs operate" in _error(refused)
    wakes = [
        d.event async for d in bus.replay(RUNS, run_id="run_plan")
        if isinstance(d.event, RunWakeRequested)
    ]  # fmt: skip
    assert [(w.reason, w.requested_by) for w in wakes] == [("CI is green", "mcp:tok")]
