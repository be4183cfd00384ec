"""Warm starts (issue 41): the demo's feature flow, wall time, with warm runners and without.

`make demo`'s flow (examples/flows/feature.yaml: plan, implement, review with one round of
changes, implement again, review, test: six runs one after another) on a real local stack,
`nexus dev up --offline-model` in a temporary home, twice: once with the scheduler's warm
pool off (``NEXUS_WARM_POOL={"default": 0}``: every step's runner a process started for it)
and once with the default pool (each agent's runner started ahead, handed the step's run).
Each stack runs the flow FLOWS times on one copy of examples/demo-repo (a team's repository:
each flow run pushes branches of its own); the first flow of a warm stack meets pools that
have not learnt their agents' sandbox yet (a pool takes its shape from the agent's last run,
and a local remote's path is part of it), so the figure is the median of the later ones, and
the first is shown too. The wall time is `nexus flow run --follow --wait`'s, CLI start included
(the same in both).
"""

from __future__ import annotations

import asyncio
import json
import shutil
import statistics
import subprocess
import time
from pathlib import Path

from bench.servers import offline_stack
from scripts.chaos_flows import Nexus

Row = tuple[str, float, str, float]

ROOT = Path(__file__).resolve().parents[1]
FLOWS = 3  # a stack's flows: the first (pools still learning), then the measured ones
POOL_OFF = json.dumps({"default": 0})
INPUT = (
    "The test suite of this project fails (test_add). Find the bug, fix it in the code and"
    " make the tests pass."
)


def _repo(where: Path) -> Path:
    """A fresh git repository from examples/demo-repo, as the demo makes it."""
    shutil.copytree(ROOT / "examples/demo-repo", where)
    git = ["git", "-C", str(where), "-c", "user.name=Bench", "-c", "user.email=bench@nexus.local"]
    subprocess.run([*git, "init", "-q", "-b", "main"], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "calc (add is broken)"], check=True)
    return where


async def _ok(nexus: Nexus, *args: str, seconds: float = 60) -> None:
    done = await asyncio.to_thread(nexus, *args, timeout=seconds)
    if done.returncode != 0:
        raise RuntimeError(f"nexus {' '.join(args[:2])}: {done.stdout} {done.stderr}")


async def _flows(pool: str | None) -> list[float]:
    """Wall seconds of FLOWS feature flows on a fresh stack (`pool`: NEXUS_WARM_POOL)."""
    extra = {"NEXUS_WARM_POOL": pool} if pool is not None else {}
    walls: list[float] = []
    async with offline_stack("nxbench-warmflow-", extra, cwd=ROOT) as (tmp, nexus):
        repo = await asyncio.to_thread(_repo, tmp / "repo")
        for kind in ("skills", "agents", "flows"):
            await _ok(nexus, kind, "apply", "-f", f"examples/{kind}")
        for i in range(FLOWS):
            task = f"WARM-{i}"
            await _ok(nexus, "task", "create", "Fix the failing test in calc", "--id", task)
            started = time.perf_counter()
            await _ok(
                nexus, "flow", "run", "feature", "--task", task, "--repo", str(repo),
                "--input", INPUT, "--follow", "--wait", "600", seconds=620,
            )  # fmt: skip
            walls.append(time.perf_counter() - started)
    return walls


async def run() -> list[Row]:
    cold = await _flows(POOL_OFF)
    warm = await _flows(None)
    cold_mid, warm_mid = statistics.median(cold[1:]), statistics.median(warm[1:])
    return [
        ("feature flow (6 runs), warm pool off, s", cold_mid, "", 0.0),
        ("feature flow (6 runs), warm pool on, s", warm_mid, "pool off", warm_mid / cold_mid),
        ("first flow of the stack, pool off, s", cold[0], "", 0.0),
        ("first flow of the stack, pool on (learning), s", warm[0], "pool off", warm[0] / cold[0]),
    ]
