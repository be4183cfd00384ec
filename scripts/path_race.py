"""A racing symlink swapper against the file tools and sandboxed JS (issue 35, "Paths").

    uv run --frozen python -m scripts.path_race [--calls 10000]

A process keeps swapping the workspace directory ``d`` for a symlink to a directory outside
the workspace, or for a link loop (and back, atomically: renameat2 RENAME_EXCHANGE), while
the calls run one at a time through a real `ToolRegistry`, as the runner makes them:
read_file, write_file and edit_file of ``d/f.txt`` and ``d/new.txt``, and a sandboxed
JavaScript tool (tokens ``workspace:read:d/*`` and ``workspace:write:d/*``) calling
``nexus.workspace.read`` / ``write``. It counts:

- outputs carrying the outside file's content (a read that left the workspace);
- calls after which a file outside was created or changed (names, sizes, mtimes);
- exceptions out of the registry's `decide` or `execute` (each would kill the runner).

All three must be 0. Calls refused during a swap (no such file, the path changed) are fine:
they are tool results the model reads. services/runner/tests/unit/test_path_race.py runs the
same with fewer calls.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ctypes
import json
import multiprocessing
import os
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from multiprocessing.sharedctypes import Synchronized
from multiprocessing.synchronize import Event
from pathlib import Path

from nexus_events.events.specs import Permissions, SandboxTool, ToolGrant
from nexus_runner.git import Author, Git
from nexus_runner.tools import ToolContext, ToolRegistry
from nexus_runner.workspace import Workspace

JS_IO = """
async function run(args) {
  if (args.op === "read") return nexus.workspace.read(args.path);
  nexus.workspace.write(args.path, args.text);
  return "wrote";
}
"""


@dataclass
class RaceResult:
    calls: int = 0
    outside_reads: int = 0
    outside_writes: int = 0  # calls after which something outside had changed
    outside_changed: list[str] = field(default_factory=list)
    escaped: list[str] = field(default_factory=list)
    refused: int = 0
    swaps: int = 0
    seconds: float = 0.0


def _registry(root: Path) -> ToolRegistry:
    ws = Workspace(root)
    ctx = ToolContext(
        workspace=ws, git=Git(ws.root, Author("a", "a@x")), shell_timeout=5, output_cap=100_000
    )
    js = SandboxTool(
        name="js_io",
        description="reads or writes a workspace file",
        parameters={"type": "object"},
        source=JS_IO,
        capabilities=["workspace:read:d/*", "workspace:write:d/*"],
        # A refused call ends the guest's context; the pool makes a new one per call.
        limits={"host_calls": 10},
    )
    return ToolRegistry(
        [ToolGrant(name=n) for n in ("read_file", "write_file", "edit_file")],
        Permissions(auto_approve="all_but_destructive"),
        ctx,
        sandbox_tools=[js],
    )


def _snapshot(directory: Path) -> dict[str, tuple[int, int]]:
    return {
        p.relative_to(directory).as_posix(): (p.lstat().st_size, p.lstat().st_mtime_ns)
        for p in sorted(directory.rglob("*"))
    }


def _exchange(a: Path, b: Path) -> None:
    """Swap two names atomically (renameat2 RENAME_EXCHANGE): `d` is never missing, so the
    calls see a directory or a link, as an attacker's swapper would arrange."""
    if _renameat2(_AT_FDCWD, bytes(a), _AT_FDCWD, bytes(b), _RENAME_EXCHANGE) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err), str(a))


_libc = ctypes.CDLL(None, use_errno=True)
_renameat2 = _libc.renameat2
_renameat2.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
_AT_FDCWD = -100
_RENAME_EXCHANGE = 2


def _swapper(ws: Path, outside: Path, stop: Event, swaps: Synchronized[int]) -> None:
    """`d` a real directory, then a symlink (to `outside`, or every other time a link loop,
    which the path checks must survive too), and back, until stopped. Runs in a process of
    its own, as an agent's shell would: truly beside the calls, not taking turns on the GIL."""
    d, to_outside, loop = ws / "d", ws / "d.out", ws / "d.loop"
    to_outside.symlink_to(outside)
    loop.symlink_to("d")  # a loop while it is named `d`
    count = 0
    while not stop.is_set():
        link = to_outside if count % 2 == 0 else loop
        _exchange(d, link)
        _exchange(d, link)
        count += 1
        swaps.value = count


_CALLS: list[tuple[str, dict[str, object]]] = [
    ("read_file", {"path": "d/f.txt"}),
    ("write_file", {"path": "d/new.txt", "content": "written inside\n"}),
    ("edit_file", {"path": "d/f.txt", "old": "inside", "new": "inside"}),
    ("js_io", {"op": "read", "path": "d/f.txt"}),
    ("js_io", {"op": "write", "path": "d/js.txt", "text": "js inside\n"}),
    ("write_file", {"path": "d/f.txt", "content": "inside\n"}),
]


@contextlib.contextmanager
def _swapping(ws: Path, outside: Path) -> Iterator[Synchronized[int]]:
    """The swapper process, running (it has swapped at least once) until the block ends."""
    processes = multiprocessing.get_context("spawn")
    stop = processes.Event()
    swaps: Synchronized[int] = processes.Value("q", 0)
    swapper = processes.Process(target=_swapper, args=(ws, outside, stop, swaps), daemon=True)
    swapper.start()
    try:
        deadline = time.monotonic() + 30
        while swaps.value == 0:
            if not swapper.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the swapper process did not start swapping")
            time.sleep(0.01)
        yield swaps
    finally:
        stop.set()
        swapper.join(10)
        if swapper.is_alive():
            swapper.kill()
            swapper.join()


def _setup(base: Path, secret: str) -> tuple[Path, Path]:
    ws, outside = base / "ws", base / "outside"
    (ws / "d").mkdir(parents=True)
    outside.mkdir()
    (ws / "d" / "f.txt").write_text("inside\n")
    (outside / "f.txt").write_text(f"inside {secret}\n")  # edit_file would match it too
    (outside / "new.txt").write_text(f"{secret}\n")
    return ws, outside


async def race(base: Path, calls: int) -> RaceResult:
    """Run `calls` tool calls against the swapper in `base` (made empty by the caller)."""
    secret = f"OUTSIDE-{uuid.uuid4().hex}"
    ws, outside = _setup(base, secret)
    before = _snapshot(outside)
    reg = _registry(ws)
    result = RaceResult()
    started = time.monotonic()
    try:
        with _swapping(ws, outside) as swaps:
            for i in range(calls):
                name, args = _CALLS[i % len(_CALLS)]
                result.calls += 1
                try:
                    decision = reg.decide(name, json.dumps(args))
                    outcome = await reg.execute(decision) if decision.action == "run" else None
                except Exception as exc:  # noqa: BLE001 - counted: each would kill the runner
                    result.escaped.append(f"{name}: {type(exc).__name__}: {exc}")
                    continue
                if outcome is None or not outcome.ok:
                    result.refused += 1
                if outcome is not None and secret in outcome.output:
                    result.outside_reads += 1
                now = _snapshot(outside)
                if now != before:
                    result.outside_writes += 1
                    result.outside_changed.extend(_changed(before, now))
                    before = now
        result.swaps = swaps.value
    finally:
        result.seconds = time.monotonic() - started
        if reg._sandbox is not None and reg._sandbox._worker is not None:
            reg._sandbox._worker.stop()
    return result


def _changed(before: dict[str, tuple[int, int]], after: dict[str, tuple[int, int]]) -> list[str]:
    return sorted(name for name in set(before) | set(after) if before.get(name) != after.get(name))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=10_000)
    calls = parser.parse_args().calls
    with tempfile.TemporaryDirectory() as tmp:
        result = asyncio.run(race(Path(tmp), calls))
    print(
        f"{result.calls} calls in {result.seconds:.1f} s against {result.swaps} swaps:"
        f" {result.outside_reads} reads of the outside file,"
        f" {result.outside_writes} calls that wrote outside {sorted(set(result.outside_changed))},"
        f" {len(result.escaped)} exceptions out of the registry,"
        f" {result.refused} calls refused during swaps"
    )
    for line in result.escaped[:10]:
        print("  escaped:", line)
    ok = not (result.outside_reads or result.outside_writes or result.escaped)
    raise SystemExit(0 if ok else 1)


if __name__ == "__main__":
    main()
