"""The MCP server as compose runs it, without Docker: core and the `mcp` service from
compose.yaml's own commands and environments, against a real nats-server started with
deploy/nats/nats.conf and a real PostgreSQL. Every tool is called over HTTP with an `operate`
token acting as NATS user mcp-operate and a `read` token acting as mcp-read, while the server
itself is connected as mcp-read (subscriptions, the board): the rendered permissions are
enough (no violation in the NATS log, which the `compose_nats` fixture checks) and each
connection uses the user its token names."""

from __future__ import annotations

import asyncio
import hashlib
import json
import secrets
import signal
import urllib.request
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import yaml
from mcp import Client
from mcp.client.streamable_http import create_mcp_http_client, streamable_http_client
from nexus_events.contract import subjects
from nexus_events.contract.streams import INBOX, RUNS
from nexus_events.events import ApprovalRequested, RunCancelled, RunSleeping
from nexus_events.events.catalog import AgentApplied, AgentDefinition
from nexus_events.transport.bus import Bus, BusSettings
from nexus_testing import eventually, free_port

from .compose_model import environment
from .test_compose_smoke import (  # noqa: F401  (the fixtures are used by name)
    Service,
    _base_env,
    _mapped,
    _until_ready,
    compose,
    compose_nats,
)

AGENT = "mcp-smoke"


def _tokens(path: Path) -> dict[str, str]:
    """A tokens file with one token per NATS user; returns {scope: token}."""
    made = {"operate": secrets.token_urlsafe(24), "read": secrets.token_urlsafe(24)}
    entries = [
        {
            "name": f"smoke-{scope}",
            "sha256": hashlib.sha256(token.encode()).hexdigest(),
            "scope": scope,
            "nats_user": f"mcp-{scope}",
            "nats_password_env": f"NEXUS_MCP_{scope.upper()}_NATS_PASSWORD",
        }
        for scope, token in made.items()
    ]
    path.write_text(yaml.safe_dump({"tokens": entries}))
    return made


@asynccontextmanager
async def _client(url: str, token: str) -> AsyncIterator[Client]:
    http = create_mcp_http_client(headers={"Authorization": f"Bearer {token}"})
    async with http, Client(streamable_http_client(url, http_client=http)) as client:
        yield client


async def _call(client: Client, tool: str, **arguments: Any) -> dict[str, Any]:
    result = await client.call_tool(tool, arguments)
    text = "".join(getattr(c, "text", "") for c in result.content)
    assert not result.is_error, f"{tool}: {text}"
    if isinstance(result.structured_content, dict):
        return result.structured_content
    data: dict[str, Any] = json.loads(text)
    return data


async def _error(client: Client, tool: str, **arguments: Any) -> str:
    """A call that fails at Nexus (not at NATS): its one line."""
    result = await client.call_tool(tool, arguments)
    text = "".join(getattr(c, "text", "") for c in result.content)
    assert result.is_error, f"{tool} succeeded: {text}"
    assert "\n" not in text.strip(), text
    return text


def _connections(monitor: int) -> dict[str, set[str]]:
    url = f"http://127.0.0.1:{monitor}/connz?state=all&auth=true&limit=1000"
    with urllib.request.urlopen(url, timeout=2) as resp:
        conns = json.load(resp)["connections"]
    users: dict[str, set[str]] = {}
    for c in conns:
        users.setdefault(c.get("name", ""), set()).add(c.get("authorized_user", ""))
    return users


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=1) as resp:
            return bool(resp.status == 200)
    except OSError:
        return False


async def _until_healthy(service: Service, url: str, within: float = 30) -> None:
    async def healthy() -> bool:
        if await asyncio.to_thread(_healthy, url):
            return True
        assert service.proc is not None
        assert service.proc.poll() is None, service.tail()
        return False

    await eventually(
        healthy, within=within, interval=0.1, what=f"{service.name} healthy", detail=service.tail
    )


async def test_every_tool_within_the_mcp_users_permissions(
    compose: dict[str, Any],  # noqa: F811
    compose_nats: tuple[str, int],  # noqa: F811
    pg_dsn: str,
    tmp_path: Path,
) -> None:
    nats_url, monitor = compose_nats
    services = compose["services"]
    nats_env = environment(services["nats"])
    core = Service(
        "core",
        services["core"],
        {**_base_env(), **_mapped(environment(services["core"]), nats_url, pg_dsn, "", tmp_path)},
        tmp_path,
    )
    tokens = _tokens(tmp_path / "tokens.yaml")
    port = free_port()
    spec = dict(services["mcp"])
    entry = list(spec["entrypoint"])
    entry[entry.index("--host") + 1] = "127.0.0.1"
    entry[entry.index("--port") + 1] = str(port)
    entry[entry.index("--tokens") + 1] = str(tmp_path / "tokens.yaml")
    spec["entrypoint"] = entry
    mcp_env = _mapped(environment(services["mcp"]), nats_url, pg_dsn, "", tmp_path)
    mcp = Service("mcp", spec, {**_base_env(), **mcp_env}, tmp_path)
    admin = await Bus.connect(
        BusSettings(
            url=nats_url,
            user="admin",
            password=nats_env["NEXUS_ADMIN_NATS_PASSWORD"],
            connect_attempts=2,
        ),
        source="operator",
    )
    url = f"http://127.0.0.1:{port}/mcp"
    try:
        core.start()
        await _until_ready(core, int(core.env["NEXUS_HEALTH_PORT"]))
        agent = AgentDefinition.model_validate(
            {
                "id": AGENT,
                "role": "implementer",
                "model": {"name": "gpt-4o-mini"},
                "system_prompt": "You write files.",
                "tools": ["write_file", "finish"],
            }
        )
        await admin.publish(
            subjects.catalog_event("agent", AGENT, "applied"), AgentApplied(definition=agent)
        )
        mcp.start()
        await _until_healthy(mcp, f"http://127.0.0.1:{port}/healthz")

        async with _client(url, tokens["operate"]) as op, _client(url, tokens["read"]) as ro:
            await eventually(  # core's catalog trails the stream
                lambda: _call(ro, "list_agents"),
                lambda listed: AGENT in json.dumps(listed),
                within=20,
                interval=0.2,
                what=f"{AGENT} listed",
            )
            # operate: start (the run request), cancel; the run's view through core.
            run_id = (await _call(op, "start_run", agent=AGENT, input="hello"))["run_id"]
            assert run_id in json.dumps(await _call(ro, "get_run", run_id=run_id))
            await _call(op, "cancel_run", run_id=run_id)
            flow_run = await _call(op, "start_flow", flow="no-such-flow", input="x")
            assert flow_run["flow_run_id"]
            # A gated tool of a second run, answered by the token that started it (its
            # requester): the approver policy's replay, the KV claim, the inbox decision.
            gated = (await _call(op, "start_run", agent=AGENT, input="gate"))["run_id"]
            await admin.publish(
                subjects.run_event(gated, "approval_requested"),
                ApprovalRequested(
                    approval_id="apr-1", tool="write_file", summary="write a file",
                    expires_at=datetime.now(UTC) + timedelta(minutes=5),
                ),
            )  # fmt: skip
            pending = await _call(ro, "list_approvals", run_id=gated)
            assert [a["approval_id"] for a in pending["approvals"]] == ["apr-1"], pending
            await _call(
                op, "answer_approval", run_id=gated, approval_id="apr-1", decision="approve"
            )
            decisions = [d async for d in admin.replay(INBOX, filter_subject=subjects.inbox(gated))]
            assert len(decisions) == 1
            # A sleeping run woken: wake_requested under the operate user's permissions.
            sleeper = (await _call(op, "start_run", agent=AGENT, input="sleep"))["run_id"]
            await admin.publish(
                subjects.run_event(sleeper, "sleeping"),
                RunSleeping(
                    until=datetime.now(UTC) + timedelta(hours=1), reason="CI", attempt=1, turn=1
                ),
            )
            await eventually(
                lambda: _call(ro, "get_run", run_id=sleeper),
                lambda view: view["run"]["status"] == "sleeping",
                within=20,
                interval=0.2,
                what=f"{sleeper} sleeping",
            )
            await _call(op, "wake_run", run_id=sleeper, reason="CI is green")
            wakes = [
                d async for d in admin.replay(
                    RUNS, filter_subject=subjects.run_event(sleeper, "wake_requested")
                )
            ]  # fmt: skip
            assert len(wakes) == 1
            # read: the board, flows, dead letters, and a run followed to its end.
            await _call(ro, "board")
            await _call(ro, "list_flows")
            await _call(ro, "list_dead_letters")
            await admin.publish(
                subjects.run_event(run_id, "cancelled"), RunCancelled(reason="user_requested")
            )
            followed = await _call(ro, "follow_run", run_id=run_id, timeout_seconds=20)
            assert "cancelled" in json.dumps(followed), followed
            # Memory's queries are allowed to both; no memory service runs here, so the
            # answer is an error of Nexus, not a refusal of NATS.
            await _error(ro, "search_memory", query="anything")
            await _error(op, "add_memory", text="a fact", scope="global")
            # The read token's identity never publishes: refused before NATS.
            refused = await _error(ro, "cancel_run", run_id=run_id)
            assert refused == "scope read may not call cancel_run (needs operate)"

        users = await asyncio.to_thread(_connections, monitor)
        assert users.get("nexus-mcp") == {"mcp-read"}, users
        assert users.get("nexus-mcp:smoke-operate") == {"mcp-operate"}, users
        assert users.get("nexus-mcp:smoke-read") == {"mcp-read"}, users
    finally:
        await admin.close()
        stopped = mcp.stop()
        # core's drain on SIGTERM is test_compose_smoke's: not waited for twice.
        if core.proc is not None and core.proc.poll() is None:
            core.proc.kill()
            core.proc.wait(10)
    # The server stops on SIGTERM, as `docker compose stop` asks, without being killed: its
    # uvicorn shuts down, then re-raises the signal it caught.
    assert stopped in {0, -signal.SIGTERM}, mcp.tail()
