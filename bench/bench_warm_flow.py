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
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from scripts import chaos_flows
from tests.support import devstack

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


async def _flows(pool: str | None) -> list[float]:
    """Wall seconds of FLOWS feature flows on a fresh stack (`pool`: NEXUS_WARM_POOL)."""
    with tempfile.TemporaryDirectory(prefix="nxbench-warmflow-") as name:
        tmp = Path(name)
        path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
        extra = {"PATH": path, **({"NEXUS_WARM_POOL": pool} if pool is not None else {})}
        env = devstack.stack_env(tmp, extra, drop=("NEXUS_", "OPENAI_"))
        nexus = chaos_flows.cli(env, ROOT)
        up = await asyncio.to_thread(nexus, "dev", "up", "--offline-model", "-o", "json",
                                     timeout=180)  # fmt: skip
        if up.returncode != 0:
            raise RuntimeError(f"nexus dev up failed: {up.stderr}")
        walls: list[float] = []
        try:
            repo = await asyncio.to_thread(_repo, tmp / "repo")
            for cmd in (
                ("skills", "apply", "-f", "examples/skills"),
                ("agents", "apply", "-f", "examples/agents"),
                ("flows", "apply", "-f", "examples/flows"),
            ):
                done = await asyncio.to_thread(nexus, *cmd, timeout=60)
                if done.returncode != 0:
                    raise RuntimeError(f"nexus {' '.join(cmd)}: {done.stderr}")
            for i in range(FLOWS):
                task = f"WARM-{i}"
                done = await asyncio.to_thread(
                    nexus, "task", "create", "Fix the failing test in calc", "--id", task,
                    timeout=60,
                )  # fmt: skip
                if done.returncode != 0:
                    raise RuntimeError(f"nexus task create: {done.stderr}")
                started = time.perf_counter()
                done = await asyncio.to_thread(
                    nexus, "flow", "run", "feature", "--task", task, "--repo", str(repo),
                    "--input", INPUT, "--follow", "--wait", "600", timeout=620,
                )  # fmt: skip
                if done.returncode != 0:
                    raise RuntimeError(f"nexus flow run: {done.stdout} {done.stderr}")
                walls.append(time.perf_counter() - started)
        finally:
            await asyncio.to_thread(nexus, "dev", "down", timeout=120)
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
