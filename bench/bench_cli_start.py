"""CLI and runner start (issue 41): wall time of fresh processes beside a bare interpreter.

`python -m bench cli_start`. Each figure is the median wall time of ROUNDS fresh processes,
interleaved round by round with `python -c pass` (the same-run baseline: the interpreter's own
start on this machine, under this load):
- `nexus --help`: the root's help (the lazy command table, no command module);
- `nexus ps --help`: the import of `nexus ps`'s path (its command module, the client, the
  contract) without a stack; `nexus ps` against a stack adds one request-reply to it;
- `nexus run --help`: the same module as `ps` (runs.py holds run, ps and attach);
- runner cold start, process -> ready for a config: import nexus_runner.app and build
  RunnerSettings, as `python -m nexus_runner` does before it reads its config.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

Row = tuple[str, float, str, float]

ROUNDS = 7
BIN = Path(sys.executable).parent
BASELINE = [sys.executable, "-c", "pass"]
RUNNER_READY = (
    "import nexus_runner.app\nfrom nexus_runner.config import RunnerSettings\nRunnerSettings()\n"
)
CASES: list[tuple[str, list[str]]] = [
    ("nexus --help (ms)", [str(BIN / "nexus"), "--help"]),
    ("nexus ps --help: ps's import path (ms)", [str(BIN / "nexus"), "ps", "--help"]),
    ("nexus run --help (ms)", [str(BIN / "nexus"), "run", "--help"]),
    ("runner cold start: process -> ready for a config (ms)", [sys.executable, "-c", RUNNER_READY]),
]


def _wall(argv: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(
        argv,
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, "COLUMNS": "100"},
        timeout=120,
    )
    return time.perf_counter() - start


async def run() -> list[Row]:
    base: list[float] = []
    walls: dict[str, list[float]] = {name: [] for name, _ in CASES}
    for _ in range(ROUNDS):
        for name, argv in CASES:
            base.append(_wall(BASELINE))
            walls[name].append(_wall(argv))
    baseline = statistics.median(base)
    ms = 1000.0
    rows: list[Row] = [("python -c pass (ms)", baseline * ms, "", 0.0)]
    for name, _ in CASES:
        figure = statistics.median(walls[name])
        rows.append((name, figure * ms, "python -c pass", figure / baseline))
    return rows
