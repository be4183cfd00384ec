"""The process's one wasmtime engine for QuickJS: epoch interruption on, a ticker, contexts.

quickjs-rs (quickjs-ng compiled to wasm32-wasip1) compiles its guest module once per process
against a shared engine; we give it ours, built with epoch interruption, so every store has a
hard wall-clock stop that no guest code can outrun (quickjs-rs's own timeout is polled by the
interpreter and a GC-heavy loop overran it five-fold). A daemon thread advances the epoch
every `TICK` seconds; a store traps once the epoch passes its deadline.

Nothing else of the process reaches the guest: no preopened directory, no environment, no
sockets, no clock beyond WASI's (which only tells time). stdout/stderr are not inherited.
"""

from __future__ import annotations

import threading
import time
import types
from typing import Any

import quickjs_rs
import quickjs_rs._engine as qjs_engine
import quickjs_rs._wasmtime as qjs_wasmtime
import wasmtime

TICK = 0.01
# Far enough never to trap before a call sets its own deadline (instantiation runs guest code).
_IDLE_TICKS = 1 << 40

_lock = threading.Lock()
_shared: dict[str, wasmtime.Engine] = {}  # "engine" once made


class _DeadlineStore(wasmtime.Store):
    """A store that starts with a far deadline: with epoch interruption the default is 0,
    which traps at the first instruction."""

    def __init__(self, engine: wasmtime.Engine | None = None, data: Any = None) -> None:
        super().__init__(engine, data)
        self.set_epoch_deadline(_IDLE_TICKS)


class _QuietWasi(wasmtime.WasiConfig):
    """quickjs-rs lets its guest inherit the runner's stdout/stderr; ours writes nowhere."""

    def inherit_stdout(self) -> None:
        return None

    def inherit_stderr(self) -> None:
        return None


def _tick(engine: wasmtime.Engine) -> None:
    while True:
        time.sleep(TICK)
        engine.increment_epoch()


def engine() -> wasmtime.Engine:
    """The shared engine, installed into quickjs-rs before it compiles anything."""
    with _lock:
        if "engine" not in _shared:
            config = wasmtime.Config()
            config.epoch_interruption = True
            shared = wasmtime.Engine(config)
            if qjs_wasmtime._SHARED_ENGINE is not None:
                raise RuntimeError("quickjs-rs compiled its module before the sandbox engine")
            qjs_wasmtime._SHARED_ENGINE = shared
            # Only quickjs-rs's engine module sees these two replacements.
            shim = types.ModuleType("wasmtime")
            shim.__dict__.update(wasmtime.__dict__)
            shim.Store = _DeadlineStore  # type: ignore[attr-defined]
            shim.WasiConfig = _QuietWasi  # type: ignore[attr-defined]
            qjs_engine.wasmtime = shim  # type: ignore[attr-defined]
            threading.Thread(target=_tick, args=(shared,), name="wasm-epoch", daemon=True).start()
            _shared["engine"] = shared
        return _shared["engine"]


def ticks(seconds: float) -> int:
    return max(1, int(seconds / TICK) + 1)


def new_context(*, memory_bytes: int, stack_bytes: int, timeout: float) -> Any:
    """A fresh QuickJS context (its own wasm instance and linear memory), capped in memory by
    QuickJS's allocator limit and, below it, by the store's limit on linear memory."""
    engine()
    runtime = quickjs_rs.Runtime(memory_limit=memory_bytes, stack_limit=stack_bytes)
    context = runtime.new_context(timeout=timeout)
    store = store_of(context)
    # Headroom over the JS heap: the interpreter, its C stack and the module's data.
    store.set_limits(memory_size=memory_bytes + (16 << 20))
    return context


def store_of(context: Any) -> wasmtime.Store:
    store: wasmtime.Store = context._engine_ctx._inst.store
    return store
