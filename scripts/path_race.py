"""A racing symlink swapper against the file tools and sandboxed JS (issue 35, "Paths").

    uv run --frozen python -m scripts.path_race [--calls 10000]

A thread keeps swapping the workspace directory ``d`` for a symlink to a directory outside
the workspace (and back) while the calls run one at a time through a real `ToolRegistry`,
as the runner makes them: read_file, write_file and edit_file of ``d/f.txt`` and
``d/new.txt``, and a sandboxed JavaScript tool (tokens ``workspace:read:d/*`` and
``workspace:write:d/*``) calling ``nexus.workspace.read`` / ``write``. It counts:

- outputs carrying the outside file's content (a read that left the workspace);
- files created or changed outside (names, sizes and mtimes before and after);
- exceptions out of the registry's `decide` or `execute` (each would kill the runner).

All three must be 0. Calls refused during a swap (no such file, the path changed) are fine:
they are tool results the model reads. services/runner/tests/unit/test_path_race.py runs the
same with fewer calls.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field
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
    outside_writes: list[str] = field(default_factory=list)
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


def _swapper(ws: Path, outside: Path, stop: threading.Event, result: RaceResult) -> None:
    """`d` a real directory, then a symlink to `outside`, and back, until stopped."""
    d, parked = ws / "d", ws / "d.parked"
    aside = itertools.count()
    while not stop.is_set():
        os.rename(d, parked)
        # While `d` is missing, a write may make it again (inside: a fine result): set aside.
        while True:
            try:
                os.symlink(outside, d)
                break
            except FileExistsError:
                os.rename(d, ws / f"d.made-{next(aside)}")
        os.unlink(d)
        while True:
            try:
                os.rename(parked, d)
                break
            except OSError:
                os.rename(d, ws / f"d.made-{next(aside)}")
        result.swaps += 1


_CALLS: list[tuple[str, dict[str, object]]] = [
    ("read_file", {"path": "d/f.txt"}),
    ("write_file", {"path": "d/new.txt", "content": "written inside\n"}),
    ("edit_file", {"path": "d/f.txt", "old": "inside", "new": "inside"}),
    ("js_io", {"op": "read", "path": "d/f.txt"}),
    ("js_io", {"op": "write", "path": "d/js.txt", "text": "js inside\n"}),
    ("write_file", {"path": "d/f.txt", "content": "inside\n"}),
]


async def race(base: Path, calls: int) -> RaceResult:
    """Run `calls` tool calls against the swapper in `base` (made empty by the caller)."""
    secret = f"OUTSIDE-{uuid.uuid4().hex}"
    ws, outside = base / "ws", base / "outside"
    (ws / "d").mkdir(parents=True)
    outside.mkdir()
    (ws / "d" / "f.txt").write_text("inside\n")
    (outside / "f.txt").write_text(f"inside {secret}\n")  # edit_file would match it too
    (outside / "new.txt").write_text(f"{secret}\n")
    before = _snapshot(outside)
    reg = _registry(ws)
    result = RaceResult()
    stop = threading.Event()
    swapper = threading.Thread(target=_swapper, args=(ws, outside, stop, result), daemon=True)
    started = time.monotonic()
    swapper.start()
    try:
        for i in range(calls):
            name, args = _CALLS[i % len(_CALLS)]
            result.calls += 1
            try:
                decision = reg.decide(name, json.dumps(args))
                if decision.action != "run":
                    result.refused += 1
                    continue
                outcome = await reg.execute(decision)
            except Exception as exc:  # noqa: BLE001 - counted: each one would kill the runner
                result.escaped.append(f"{name}: {type(exc).__name__}: {exc}")
                continue
            if secret in outcome.output:
                result.outside_reads += 1
            if not outcome.ok:
                result.refused += 1
    finally:
        stop.set()
        swapper.join()
        result.seconds = time.monotonic() - started
        if reg._sandbox is not None and reg._sandbox._worker is not None:
            reg._sandbox._worker.stop()
    after = _snapshot(outside)
    result.outside_writes = sorted(
        name for name in set(before) | set(after) if before.get(name) != after.get(name)
    )
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=10_000)
    calls = parser.parse_args().calls
    with tempfile.TemporaryDirectory() as tmp:
        result = asyncio.run(race(Path(tmp), calls))
    print(
        f"{result.calls} calls in {result.seconds:.1f} s against {result.swaps} swaps:"
        f" {result.outside_reads} reads of the outside file,"
        f" {len(result.outside_writes)} files written outside {result.outside_writes},"
        f" {len(result.escaped)} exceptions out of the registry,"
        f" {result.refused} calls refused during swaps"
    )
    for line in result.escaped[:10]:
        print("  escaped:", line)
    ok = not (result.outside_reads or result.outside_writes or result.escaped)
    raise SystemExit(0 if ok else 1)


if __name__ == "__main__":
    main()
