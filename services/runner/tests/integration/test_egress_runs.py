"""A whole run on real NATS with egress grants: the runner starts the tools' proxy for it (the
model's endpoint refused even though a grant names its host), a sandboxed tool's fetch and a
request through the proxy are both `egress` events of the run, and the proxy ends with it."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import urlsplit

import pytest
from nexus_events.events import RunEgress
from nexus_events.events.runs import RunCompleted, ToolResult
from nexus_events.transport.bus import Bus
from tests.fakes.openai_server import FakeOpenAI, Reply, ToolCall

from nexus_runner import app
from nexus_runner.config import RunnerSettings
from nexus_runner.egress import EgressAccess, run_egress

from .support import make_config, run_events

FETCH = """async function run(args) {
  const r = await nexus.http.fetch(args.url);
  return r.status + " " + r.body;
}"""
TOOLS = [
    {"name": "fetch", "description": "GET a URL", "source": FETCH,
     "parameters": {"type": "object", "properties": {"url": {"type": "string"}}},
     "capabilities": ["http:127.0.0.1"]},
]  # fmt: skip


async def _outside(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    line = (await reader.readuntil(b"\r\n\r\n")).split(b"\r\n")[0]
    reply = b"saw " + line
    writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(reply) + reply)
    await writer.drain()
    writer.close()


async def _through(access: EgressAccess, request: bytes) -> bytes:
    reader, writer = await asyncio.open_unix_connection(str(access.socket_path))
    writer.write(request)
    answer = await asyncio.wait_for(reader.read(), 10)
    writer.close()
    return answer


async def test_a_run_with_grants_gets_a_proxy_and_every_request_is_its_event(
    bus: Bus, runner_bus: Bus, settings: RunnerSettings, monkeypatch: pytest.MonkeyPatch
) -> None:
    server = await asyncio.start_server(_outside, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    answers: list[bytes] = []
    seen: list[EgressAccess | None] = []

    @contextlib.asynccontextmanager
    async def observed(*args: Any, **kwargs: Any) -> AsyncIterator[EgressAccess | None]:
        # The run's own proxy, asked from outside as a tool's client would ask it.
        async with run_egress(*args, **kwargs) as access:
            seen.append(access)
            assert access is not None
            answers.append(
                await _through(access, f"GET http://127.0.0.1:{port}/ok HTTP/1.1\r\n\r\n".encode())
            )
            answers.append(
                await _through(
                    access, f"GET http://127.0.0.1:{llm_port}/v1/x HTTP/1.1\r\n\r\n".encode()
                )
            )
            yield access

    monkeypatch.setattr(app, "run_egress", observed)
    script = [
        Reply(tool_calls=(ToolCall("fetch", {"url": f"http://127.0.0.1:{port}/js"}),)),
        Reply(tool_calls=(ToolCall("finish", {"summary": "done"}),)),
    ]
    async with FakeOpenAI(script) as llm:
        llm_port = urlsplit(llm.base_url).port
        config = make_config(
            llm.base_url,
            sandbox_tools=TOOLS,
            egress=[{"host": "127.0.0.1", "port": port}, {"host": "127.0.0.1", "port": llm_port}],
        )
        terminal = await asyncio.wait_for(app.execute_run(config, settings, runner_bus), 90)
    server.close()
    assert isinstance(terminal, RunCompleted), terminal
    assert answers[0].startswith(b"HTTP/1.1 200")
    assert answers[0].endswith(b"saw GET /ok HTTP/1.1")
    assert answers[1].startswith(b"HTTP/1.1 403")
    assert b"runner's own endpoint" in answers[1]
    access = seen[0]
    assert access is not None
    assert not access.net_dir.exists()  # gone with the run
    events = await run_events(bus, config.run_id)
    results = {e.tool: (e.ok, e.output) for e in events if isinstance(e, ToolResult)}
    assert results["fetch"] == (True, "200 saw GET /js HTTP/1.1")
    egress = [e for e in events if isinstance(e, RunEgress)]
    assert sorted((e.via, e.path, e.allowed, e.status) for e in egress) == [
        ("proxy", "/ok", True, 200),
        ("proxy", "/v1/x", False, 403),
        ("sandbox", "/js", True, 200),
    ]
