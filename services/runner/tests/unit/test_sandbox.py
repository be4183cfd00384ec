"""Sandboxed JavaScript tools through the registry: tokens checked at every host call, each
limit a clear error within its wall time, and the registry going on after each."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from nexus_events.events.specs import Hooks, Permissions, SandboxTool, ToolGrant
from nexus_testing import eventually

from nexus_runner import safety
from nexus_runner.git import Author, Git
from nexus_runner.sandbox import HostEnv, RunSandbox
from nexus_runner.tools import ToolContext, ToolRegistry
from nexus_runner.workspace import Workspace

COPY_UP = """
async function run(args) {
  const text = nexus.workspace.read(args.src);
  nexus.workspace.write(args.dst, text.toUpperCase());
  return { copied: text.length };
}
"""


def tool(name: str, source: str, caps: list[str] | None = None, **limits: Any) -> SandboxTool:
    return SandboxTool(
        name=name,
        description=f"{name} tool",
        parameters={"type": "object", "properties": {"src": {"type": "string"}}},
        source=source,
        capabilities=caps or [],
        limits=limits,
    )


def registry(root: Path, tools: list[SandboxTool], **ctx: Any) -> ToolRegistry:
    ws = Workspace(root)
    context = ToolContext(
        workspace=ws, git=Git(ws.root, Author("a", "a@x")), shell_timeout=5, output_cap=1000, **ctx
    )
    return ToolRegistry(
        [ToolGrant(name="read_file")],
        Permissions(),
        context,
        sandbox_tools=tools,
    )


async def call(reg: ToolRegistry, name: str, **args: Any) -> tuple[bool, str, float]:
    decision = reg.decide(name, json.dumps(args))
    assert decision.action == "run", decision.reason
    started = time.monotonic()
    outcome = await reg.execute(decision)
    return outcome.ok, outcome.output, time.monotonic() - started


async def test_reads_an_allowed_file_writes_an_allowed_one_and_is_refused_without_the_token(
    tmp_path: Path,
) -> None:
    (tmp_path / "in.txt").write_text("hello")
    (tmp_path / "secret.txt").write_text("nope")
    reg = registry(
        tmp_path,
        [
            tool("copy_up", COPY_UP, ["workspace:read:in.txt", "workspace:write:out/*.txt"]),
            tool("copy_any", COPY_UP, ["workspace:read:*.txt"]),
        ],
    )
    names = [s["function"]["name"] for s in reg.specs()]
    assert {"copy_up", "copy_any", "read_file"} <= set(names)
    assert await call(reg, "copy_up", src="in.txt", dst="out/a.txt") == (
        True,
        '{"copied": 5}',
        pytest.approx(0, abs=5),
    )
    assert (tmp_path / "out" / "a.txt").read_text() == "HELLO"

    ok, out, _ = await call(reg, "copy_up", src="secret.txt", dst="out/b.txt")
    assert not ok
    assert "missing capability workspace:read:secret.txt" in out
    ok, out, _ = await call(reg, "copy_any", src="in.txt", dst="x.txt")
    assert not ok
    assert "missing capability workspace:write:x.txt" in out
    assert not (tmp_path / "x.txt").exists()
    # A refusal is final even when the JavaScript catches it.
    catcher = "async function run() { try { nexus.state.set('k', 1) } catch (e) {} return 'ok' }"
    reg2 = registry(tmp_path, [tool("catcher", catcher)])
    ok, out, _ = await call(reg2, "catcher")
    assert (ok, out) == (
        False,
        "catcher: missing capability state:write:k (declare a token granting it)",
    )
    # Arguments are checked against the tool's schema before anything runs.
    assert reg.decide("copy_up", json.dumps({"src": 3})).action == "invalid"


def js(body: str) -> str:
    return f"async function run() {{ {body} }}"


async def test_each_limit_ends_the_call_with_a_clear_error_in_time(tmp_path: Path) -> None:
    tools = [
        tool("spin", "async function run() { while (true) {} }", wall_seconds=0.5),
        tool("churn", "async function run() { let o; for (;;) { o = {a: [1, 2], b: {}} } }",
             wall_seconds=0.5),
        tool("bomb", js("const a = []; for (;;) a.push(new Array(1e4).fill(1))")),
        tool("recurse", "async function run() { return (function f() { return f() + 1 })() }"),
        tool("flood", js("for (;;) { try { nexus.state.get('k') } catch (e) {} }"),
             ["state:read:k"], host_calls=300),
        tool("writer", "async function run() { for (let i = 0; ; i++) nexus.state.set('k', i) }",
             ["state:write:k"], state_mutations=50),
        tool("ok", "async function run() { return nexus.now().slice(0, 2) + typeof performance }"),
    ]  # fmt: skip
    reg = registry(tmp_path, tools)
    expected = {
        "spin": ("wall time limit of 0.5s exceeded", 1.5),
        "churn": ("wall time limit of 0.5s exceeded", 1.5),
        "bomb": ("memory limit of 32 MB exceeded", 3.0),
        "recurse": ("stack limit exceeded", 3.0),
        "flood": ("host-call limit of 300 reached", 3.0),
        "writer": ("state mutation limit of 50 reached", 3.0),
    }
    for name, (message, within) in expected.items():
        ok, out, seconds = await call(reg, name)
        assert not ok, name
        assert message in out, (name, out)
        assert seconds < within, (name, seconds)
        # The registry goes on: a good tool runs right after each failure.
        assert (await call(reg, "ok"))[:2] == (True, "20undefined")
    # Wall time is checked even for code that defeats the interpreter's own poll.
    assert reg.sandbox().tools["spin"].limits.wall_seconds == 0.5


async def test_no_clock_and_an_approval_suspends_then_resumes(tmp_path: Path) -> None:
    asked: list[tuple[str, str]] = []
    gate = asyncio.Event()

    async def approve(tool_name: str, reason: str) -> bool:
        asked.append((tool_name, reason))
        await gate.wait()
        return True

    source = """
    async function run() {
      let clock = 'none';
      try { Date.now(); clock = 'leak' } catch (e) {}
      const granted = await nexus.approve('deploy the thing');
      return { granted, clock };
    }"""
    reg = registry(tmp_path, [tool("deploy", source, wall_seconds=0.5)], approve=approve)
    task = asyncio.create_task(call(reg, "deploy"))
    await eventually(
        lambda: reg.sandbox().status,
        lambda status: status == "suspended",
        within=2,
        interval=0.01,
        what="the sandbox suspended",
    )
    assert reg.sandbox().status == "suspended"
    await asyncio.sleep(0.6)  # longer than the wall limit: suspended time does not count
    gate.set()
    ok, out, _ = await task
    assert (ok, json.loads(out)) == (True, {"granted": True, "clock": "none"})
    assert asked == [("deploy", "deploy the thing")]
    assert reg.sandbox().status is None
    # Without a way to ask, the call fails closed.
    bare = registry(tmp_path, [tool("deploy", source)])
    ok, out, _ = await call(bare, "deploy")
    assert not ok
    assert "approvals are not available" in out


def test_plan_mode_offers_only_read_only_sandboxed_tools(tmp_path: Path) -> None:
    reg = registry(
        tmp_path,
        [
            tool("peek", COPY_UP, ["workspace:read:*", "state:read:*"]),
            tool("poke", COPY_UP, ["workspace:read:*", "http:api.example.com"]),
            tool("read_file", COPY_UP),  # a built-in's name is not taken over
        ],
    )
    assert [s["function"]["name"] for s in reg.specs(read_only=True)] == ["read_file", "peek"]
    assert reg.reads("peek")
    assert not reg.reads("poke")
    assert any(u.startswith("read_file (sandboxed") for u in reg.unknown)
    curated = registry(tmp_path, [tool("poke", COPY_UP, ["http:api.example.com"])])
    curated.permissions = Permissions(auto_approve="curated")
    decision = curated.decide("poke", "{}")
    assert decision.action == "approve"
    assert "http:api.example.com" in decision.reason


async def test_hooks_in_javascript_judge_calls_and_outputs_and_fail_closed(
    tmp_path: Path,
) -> None:
    (tmp_path / "a.txt").write_text("token tok-123456 inside")
    scripts = [
        {"name": "no_env", "on": "before_tool_call", "tool": "read_file",
         "source": "function hook(c) { if (c.args.path.endsWith('.env'))"
                   " return {decision: 'deny', reason: 'no env files'} }"},
        {"name": "count", "on": "before_tool_call", "capabilities": ["state:write:n",
                                                                     "state:read:n"],
         "source": "function hook(c) { nexus.state.set('n', (nexus.state.get('n') || 0) + 1) }"},
        {"name": "scrub", "on": "after_tool_call", "tool": "read_file",
         "source": "function hook(c) { return {output: c.output.replace(/tok-\\d+/g, '***')} }"},
        {"name": "spin", "on": "before_tool_call", "tool": "run_*",
         "source": "function hook(c) { for (;;) {} }", "limits": {"wall_seconds": 0.3}},
        {"name": "sneaky", "on": "before_tool_call", "tool": "list_files",
         "source": "function hook(c) { return nexus.workspace.read('a.txt') }"},
    ]  # fmt: skip
    ws = Workspace(tmp_path)
    ctx = ToolContext(
        workspace=ws, git=Git(ws.root, Author("a", "a@x")), shell_timeout=5, output_cap=1000
    )
    reg = ToolRegistry(
        [ToolGrant(name=t) for t in ("read_file", "run_shell", "list_files")],
        Permissions(),
        ctx,
        hooks=Hooks.model_validate({"scripts": scripts}),
    )
    denied = reg.decide("read_file", json.dumps({"path": "x.env"}))
    assert (denied.action, denied.reason) == ("refuse", "denied by policy: no env files")
    allowed = reg.decide("read_file", json.dumps({"path": "a.txt"}))
    assert allowed.action == "run"
    outcome = await reg.execute(allowed)
    assert outcome.output.startswith("token *** inside")
    assert outcome.guard is not None
    assert outcome.guard.rule == "script scrub"
    # The scripts share the run's key/value state: `count` saw both calls.
    assert reg.scripts().env.state["n"] == "2"
    started = time.monotonic()
    spun = reg.decide("run_shell", json.dumps({"command": "ls"}))
    assert time.monotonic() - started < 2
    assert spun.action == "refuse"
    assert "wall time limit of 0.3s exceeded" in spun.reason
    sneaky = reg.decide("list_files", "{}")
    assert sneaky.action == "refuse"
    assert "missing capability workspace:read:a.txt" in sneaky.reason


async def test_the_runner_makes_http_requests_for_allowed_hosts_only(tmp_path: Path) -> None:
    seen: list[str] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(str(request.url))
        return httpx.Response(200, text="pong")

    source = """async function run(args) {
      const r = await nexus.http.fetch(args.url, {method: "POST", body: "ping"});
      nexus.events.emit("ping.done", {status: r.status});
      return r.body;
    }"""
    secrets = safety.SecretRegistry()
    secrets.add_text("API_KEY=sk-live-0123456789abcdef")
    env = HostEnv(
        Workspace(tmp_path),
        secrets,
        asyncio.get_running_loop(),
        http_transport=httpx.MockTransport(answer),
    )
    caps = ["http:api.example.com", "events:emit:ping.*"]
    box = RunSandbox([tool("ping", source, caps)], env)
    ok = await box.call("ping", {"url": "https://api.example.com/v1"})
    assert (ok.status, ok.output) == ("success", "pong")
    assert [(e.name, e.payload) for e in env.emitted] == [("ping.done", {"status": 200})]
    refused = await box.call("ping", {"url": "https://evil.example.com/x"})
    assert refused.status == "error"
    assert "missing capability http:evil.example.com" in refused.output
    leaking = await box.call("ping", {"url": "https://api.example.com/?k=sk-live-0123456789abcdef"})
    assert "a value this run keeps secret would leave" in leaking.output
    assert seen == ["https://api.example.com/v1"]
