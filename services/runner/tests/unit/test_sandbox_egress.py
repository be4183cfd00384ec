"""A sandboxed tool's `nexus.http.fetch` is recorded as the same `egress` event the tools'
proxy records: allowed requests with their status and sizes, refusals with their reason."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
from nexus_events.events import RunEgress
from nexus_events.events.specs import SandboxTool

from nexus_runner import safety
from nexus_runner.sandbox import HostEnv, RunSandbox
from nexus_runner.workspace import Workspace

SOURCE = """async function run(args) {
  const options = {method: args.method || "GET", body: args.body ?? null};
  const r = await nexus.http.fetch(args.url, options);
  return r.body;
}"""


async def test_each_fetch_allowed_or_refused_is_an_egress_event(tmp_path: Path) -> None:
    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(201, text="created!")

    events: list[RunEgress] = []

    async def record(event: RunEgress) -> None:
        events.append(event)

    secrets = safety.SecretRegistry()
    secrets.add("sk-live-0123456789abcdef")
    env = HostEnv(
        Workspace(tmp_path),
        secrets,
        asyncio.get_running_loop(),
        http_transport=httpx.MockTransport(answer),
        record_egress=record,
    )
    tool = SandboxTool(
        name="post",
        description="posts",
        parameters={"type": "object"},
        source=SOURCE,
        capabilities=["http:api.example.com"],
    )
    box = RunSandbox([tool], env)
    ok = await box.call(
        "post",
        {"url": "https://api.example.com:8443/v1/items?x=1", "method": "post", "body": "abc"},
    )
    assert (ok.status, ok.output) == ("success", "created!")
    refused = await box.call("post", {"url": "http://evil.example.com/drop"})
    assert refused.status == "error"
    leaking = await box.call("post", {"url": "https://api.example.com/?k=sk-live-0123456789abcdef"})
    assert leaking.status == "error"
    assert [(e.via, e.tool, e.scheme, e.host, e.port, e.method, e.path) for e in events] == [
        ("sandbox", "post", "https", "api.example.com", 8443, "POST", "/v1/items"),
        ("sandbox", "post", "http", "evil.example.com", 80, "GET", "/drop"),
        ("sandbox", "post", "https", "api.example.com", 443, "GET", "/"),
    ]
    first, second, third = events
    assert (first.allowed, first.status, first.bytes_up, first.bytes_down) == (True, 201, 3, 8)
    assert (second.allowed, second.status) == (False, None)
    assert "missing capability http:evil.example.com" in second.reason
    assert not third.allowed
    assert "keeps secret" in third.reason
