"""What the tools' own sandbox costs a tool call: `run_shell("true")` through the tools'
sandbox (nexus_runner.tool_sandbox: a bwrap per command, the workspace walked for
``.env``-like files to withhold) beside the same call unsandboxed (the path before it),
p50 and p95 of wall time, measured in the same run on the same small git workspace.

Without a working bwrap only the unsandboxed rows are printed, with the reason.
"""

from __future__ import annotations

import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from nexus_runner.git import Author, Git
from nexus_runner.tool_sandbox import ToolSandbox
from nexus_runner.tools import ToolContext
from nexus_runner.tools.args import RunShellArgs
from nexus_runner.tools.builtin import run_shell
from nexus_runner.workspace import Workspace

ROUNDS = 40
WARMUP = 3
# A workspace like a small project's: some files in a few directories, one .env.
FILES = 200


def _workspace(root: Path) -> Path:
    ws = root / "runs" / "run-bench"
    for i in range(FILES):
        path = ws / f"pkg{i % 10}" / f"mod{i}.py"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"X = {i}\n")
    (ws / ".env").write_text("API_KEY=bench\n")
    subprocess.run(["git", "init", "-q", str(ws)], check=True)
    return ws


async def _percentiles(ctx: ToolContext) -> tuple[float, float]:
    times = []
    for i in range(WARMUP + ROUNDS):
        start = time.perf_counter()
        await run_shell(ctx, RunShellArgs(command="true"))
        if i >= WARMUP:
            times.append((time.perf_counter() - start) * 1000)
    cuts = statistics.quantiles(times, n=20)
    return statistics.median(times), cuts[18]


async def run() -> list[tuple[str, float, str, float]]:
    rows: list[tuple[str, float, str, float]] = []
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        ws = _workspace(root)
        sandbox = ToolSandbox.detect("auto", private=[root / "runs"])
        for label, chosen in (("unsandboxed", ToolSandbox.detect("off")), ("sandboxed", sandbox)):
            if label == "sandboxed" and chosen.bwrap is None:
                print(f"  (sandboxed rows skipped: {chosen.reason})")
                break
            workspace = Workspace(ws)
            ctx = ToolContext(
                workspace=workspace,
                git=Git(ws, Author("b", "b@x")),
                shell_timeout=30,
                output_cap=10_000,
                home=root / "runs" / "run-bench.home",
                sandbox=chosen,
            )
            p50, p95 = await _percentiles(ctx)
            base = rows[0][1] if rows else 0.0
            ref = "unsandboxed p50" if rows else ""
            rows.append((f"run_shell true, {label}, p50 ms", p50, ref, p50 / base if base else 0))
            base95 = rows[1][1] if len(rows) > 1 else 0.0
            ref95 = "unsandboxed p95" if base95 else ""
            rows.append(
                (f"run_shell true, {label}, p95 ms", p95, ref95, p95 / base95 if base95 else 0)
            )
    return rows
