"""A run's sandboxed tools: instances pooled per tool, calls run on the run's sandbox thread.

The guest's JavaScript runs on a thread of its own (one per run) so a tool that burns its
whole wall time does not stall the runner's event loop (heartbeats, NATS). A context that
ended in a trap, a limit or a refusal is dropped, never pooled again: its heap may be
mid-operation.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import quickjs_rs
import wasmtime
from nexus_events.contract.capabilities import Grants
from nexus_events.events import HookScript, SandboxTool

from nexus_runner.sandbox import engine
from nexus_runner.sandbox.host import Host, HostEnv, Violation

Status = Literal["success", "error", "suspended"]
# Raw host functions are reachable only through the frozen `nexus` object; the clock is the
# host's (`nexus.now()`), not the guest's.
PRELUDE = r"""
(() => {
  const h = {};
  for (const k of ["read", "write", "state_get", "state_set", "emit", "now", "memory", "http",
                   "approve"]) {
    h[k] = globalThis["__nx_" + k];
    delete globalThis["__nx_" + k];
  }
  const f = Object.freeze;
  globalThis.nexus = f({
    workspace: f({ read: (p) => h.read(p), write: (p, t) => h.write(p, t) }),
    state: f({ get: (k) => h.state_get(k), set: (k, v) => h.state_set(k, v) }),
    events: f({ emit: (n, p) => h.emit(n, p === undefined ? null : p) }),
    memory: f({ read: (s, q) => h.memory(s, q) }),
    http: f({ fetch: (u, o) => h.http(u, o || {}) }),
    approve: (r) => h.approve(r),
    now: () => h.now(),
  });
  const RealDate = Date;
  const noClock = () => { throw new TypeError("no clock in the sandbox: use nexus.now()"); };
  RealDate.now = noClock;
  globalThis.Date = new Proxy(RealDate, {
    construct(t, args, nt) {
      if (args.length === 0) noClock();
      return Reflect.construct(t, args, nt);
    },
    apply() { noClock(); },
  });
  delete globalThis.performance;
})();
"""
_SYNC = ("read", "write", "state_get", "state_set", "emit", "now")
_ASYNC = ("memory", "http", "approve")


@dataclass(frozen=True)
class SandboxResult:
    status: Status
    output: str
    # Why it failed: limit (wall, memory, stack, host_calls, state), capability, js, load.
    kind: str = ""
    seconds: float = 0.0
    suspensions: int = 0


class _Slot:
    """One pooled context of a tool (or a hook script), and the host of the call it serves."""

    def __init__(self, tool: SandboxTool | HookScript, entry: str = "run") -> None:
        limits = tool.limits
        self.context = engine.new_context(
            memory_bytes=limits.memory_mb << 20,
            stack_bytes=limits.stack_kb << 10,
            timeout=limits.wall_seconds,
        )
        self.store = engine.store_of(self.context)
        self.host: Host | None = None
        for name in _SYNC:
            self.context.register(f"__nx_{name}", self._bound(name), is_async=False)
        for name in _ASYNC:
            self.context.register(f"__nx_{name}", self._bound_async(name), is_async=True)
        self.context.eval(PRELUDE)
        self.store.set_epoch_deadline(engine.ticks(limits.wall_seconds))
        try:
            self.context.eval(tool.source, filename=f"{tool.name}.js")
            if self.context.eval(f"typeof {entry}") != "function":
                raise ValueError(f"the source must define a function {entry}()")
        finally:
            self.store.set_epoch_deadline(1 << 40)

    def _bound(self, name: str) -> Callable[..., Any]:
        def call(*args: Any) -> Any:
            if self.host is None:
                raise Violation("no call in progress")
            return getattr(self.host, name)(*args)

        return call

    def _bound_async(self, name: str) -> Callable[..., Any]:
        async def call(*args: Any) -> Any:
            if self.host is None:
                raise Violation("no call in progress")
            return await getattr(self.host, name)(*args)

        return call

    def trip(self) -> None:
        self.store.set_epoch_deadline(1)

    def resume(self, remaining: float) -> None:
        self.store.set_epoch_deadline(engine.ticks(max(remaining, 0.0)))

    def close(self) -> None:
        self.context.close()


class _Worker:
    """The run's sandbox thread and its event loop."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self._serve, name="sandbox", daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        try:
            self.loop.run_forever()
        finally:
            self.loop.close()

    def stop(self) -> None:
        if not self.loop.is_closed():
            self.loop.call_soon_threadsafe(self.loop.stop)


class RunSandbox:
    """The sandboxed tools of one run: definitions, pooled contexts, the shared host env."""

    def __init__(self, tools: list[SandboxTool], env: HostEnv, *, pool_size: int = 2) -> None:
        self.tools = {t.name: t for t in tools}
        self.grants = {t.name: Grants.of(t.capabilities) for t in tools}
        self.env = env
        self.pool_size = pool_size
        self._idle: dict[str, list[_Slot]] = {name: [] for name in self.tools}
        self._worker: _Worker | None = None
        self._finalizer: Any = None
        # The host of the call in progress: its status is "suspended" while it awaits a human.
        self.current: Host | None = None

    @property
    def status(self) -> Status | None:
        if self.current is None:
            return None
        return "suspended" if self.current.status == "suspended" else None

    def _thread(self) -> _Worker:
        if self._worker is None:
            self._worker = _Worker()
            self._finalizer = weakref.finalize(self, self._worker.stop)
        return self._worker

    async def call(self, name: str, args: dict[str, Any]) -> SandboxResult:
        worker = self._thread()
        future = asyncio.run_coroutine_threadsafe(self._call(name, args), worker.loop)
        return await asyncio.wrap_future(future)

    async def _call(self, name: str, args: dict[str, Any]) -> SandboxResult:
        tool = self.tools[name]
        started = time.monotonic()
        try:
            slot = self._idle[name].pop() if self._idle[name] else _Slot(tool)
        except Exception as exc:  # noqa: BLE001 - whatever the guest raised loading the source
            return SandboxResult(
                "error", f"{name}: the source does not load: {_brief(exc)}", "load"
            )
        host = Host(
            self.env, name, self.grants[name], tool.limits, on_trip=slot.trip, on_resume=slot.resume
        )
        slot.host = host
        self.current = host
        slot.store.set_epoch_deadline(engine.ticks(tool.limits.wall_seconds))
        keep = False
        try:
            literal = json.dumps(json.dumps(args))
            value = await slot.context.eval_async(
                f"await run(JSON.parse({literal}))",
                filename=f"{name}.call.js",
                timeout=tool.limits.wall_seconds,
            )
            if host.violation is not None:
                return self._error(host, host.violation, "capability", started)
            keep = True
            output = value if isinstance(value, str) else _json(value)
            return SandboxResult(
                "success", output, "", time.monotonic() - started, host.suspensions
            )
        except BaseException as exc:
            if isinstance(exc, asyncio.CancelledError):
                raise
            kind, message = _classify(exc, tool, host)
            keep = kind == "js"
            return self._error(host, message, kind, started)
        finally:
            slot.host = None
            self.current = None
            slot.store.set_epoch_deadline(1 << 40)
            if keep and len(self._idle[name]) < self.pool_size:
                self._idle[name].append(slot)
            else:
                slot.close()

    def _error(self, host: Host, message: str, kind: str, started: float) -> SandboxResult:
        return SandboxResult(
            "error", f"{host.tool}: {message}", kind, time.monotonic() - started, host.suspensions
        )

    async def warm(self, name: str) -> None:
        """Load one context of `name` into the pool ahead of its first call."""
        worker = self._thread()

        async def load() -> None:
            if not self._idle[name]:
                self._idle[name].append(_Slot(self.tools[name]))

        await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(load(), worker.loop))


def _json(value: Any) -> str:
    if value is None:
        return ""
    return json.dumps(value, ensure_ascii=False, default=str)


def _brief(exc: BaseException) -> str:
    lines = [line for line in str(exc).splitlines() if line.strip()]
    return lines[-1].strip() if lines else type(exc).__name__


def _classify(exc: BaseException, tool: SandboxTool | HookScript, host: Host) -> tuple[str, str]:  # noqa: PLR0911
    """The error kind and a message that says which limit or token ended the call."""
    limits = tool.limits
    if host.violation is not None:
        kind = "limit" if "limit" in host.violation else "capability"
        return kind, host.violation
    if isinstance(exc, quickjs_rs.TimeoutError) or (
        isinstance(exc, wasmtime.Trap) and "interrupt" in str(exc)
    ):
        return "limit", f"wall time limit of {limits.wall_seconds:g}s exceeded"
    if isinstance(exc, quickjs_rs.MemoryLimitError):
        return "limit", f"memory limit of {limits.memory_mb} MB exceeded"
    if isinstance(exc, wasmtime.Trap) and "call stack exhausted" in str(exc):
        return "limit", f"stack limit exceeded (runaway recursion; stack {limits.stack_kb} KB)"
    if isinstance(exc, quickjs_rs.JSError):
        name, message = exc.name, exc.message
        if name == "RangeError" and "stack" in message:
            return "limit", f"stack limit exceeded (runaway recursion; stack {limits.stack_kb} KB)"
        if name == "InternalError" and "memory" in message:
            return "limit", f"memory limit of {limits.memory_mb} MB exceeded"
        return "js", f"{name}: {message}"
    if isinstance(exc, wasmtime.Trap | wasmtime.WasmtimeError):
        return "trap", f"the sandbox trapped: {_brief(exc)}"
    if isinstance(exc, Violation):
        return "capability", str(exc)
    return "error", f"{type(exc).__name__}: {_brief(exc)}"
