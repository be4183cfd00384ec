"""A sandboxed JavaScript tool call (QuickJS on wasmtime) beside a plain Python tool call.

All through the registry (decide + execute), reading the same small file, in one run:
- read_file: the built-in Python tool;
- sandboxed, warm: a JS tool reading the file through `nexus.workspace.read`, its context
  pooled (the usual case: every call after a tool's first in a run);
- sandboxed, cold: the same call on a fresh run sandbox (a new wasm instance, the prelude
  and the tool's source loaded), the guest module already compiled;
- once per process: compiling the QuickJS guest module.
"""

from __future__ import annotations

import json
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from nexus_events.events.specs import Permissions, SandboxTool, ToolGrant
from nexus_runner.git import Author, Git
from nexus_runner.sandbox import engine
from nexus_runner.tools import ToolContext, ToolRegistry
from nexus_runner.workspace import Workspace

WARM = 400
COLD = 40
TOOL = SandboxTool(
    name="peek",
    description="read a file",
    parameters={"type": "object", "properties": {"path": {"type": "string"}}},
    source="async function run(args) { return nexus.workspace.read(args.path) }",
    capabilities=["workspace:read:*.txt"],
)


def _registry(root: Path) -> ToolRegistry:
    ws = Workspace(root)
    ctx = ToolContext(
        workspace=ws, git=Git(ws.root, Author("b", "b@x")), shell_timeout=30, output_cap=20_000
    )
    return ToolRegistry([ToolGrant(name="read_file")], Permissions(), ctx, sandbox_tools=[TOOL])


async def _times(n: int, fn: Callable[[], Awaitable[None]]) -> list[float]:
    out = []
    for _ in range(n):
        start = time.perf_counter()
        await fn()
        out.append((time.perf_counter() - start) * 1e6)
    return sorted(out)


def _pct(times: list[float], p: float) -> float:
    return times[min(len(times) - 1, int(len(times) * p))]


async def run() -> list[tuple[str, float, str, float]]:
    start = time.perf_counter()
    engine.new_context(memory_bytes=32 << 20, stack_bytes=1 << 20, timeout=5).close()
    compile_ms = (time.perf_counter() - start) * 1e3
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "notes.txt").write_text("hello\n" * 20)
        args = json.dumps({"path": "notes.txt"})
        reg = _registry(root)

        async def call(registry: ToolRegistry, name: str) -> None:
            outcome = await registry.execute(registry.decide(name, args))
            assert outcome.ok, outcome.output

        await call(reg, "peek")  # the first call fills the pool
        await call(reg, "read_file")
        plain = await _times(WARM, lambda: call(reg, "read_file"))
        warm = await _times(WARM, lambda: call(reg, "peek"))
        cold = await _times(COLD, lambda: call(_registry(root), "peek"))
    return [
        ("QuickJS module compile, once per process, ms", compile_ms, "", 0.0),
        ("read_file (Python) p50, us/call", _pct(plain, 0.5), "", 0.0),
        ("read_file (Python) p99, us/call", _pct(plain, 0.99), "", 0.0),
        ("sandboxed warm (pooled) p50, us/call", _pct(warm, 0.5), "read_file",
         _pct(warm, 0.5) / _pct(plain, 0.5)),
        ("sandboxed warm (pooled) p99, us/call", _pct(warm, 0.99), "read_file",
         _pct(warm, 0.99) / _pct(plain, 0.99)),
        ("sandboxed cold (new instance) p50, us/call", _pct(cold, 0.5), "read_file",
         _pct(cold, 0.5) / _pct(plain, 0.5)),
        ("sandboxed cold (new instance) p99, us/call", _pct(cold, 0.99), "read_file",
         _pct(cold, 0.99) / _pct(plain, 0.99)),
    ]  # fmt: skip
