"""What bubblewrap confinement costs a local runner's start: a process started as the local
runtime starts a confined runner (outer relay -> bwrap -> inner relay -> the command) beside
the same command started plainly, p50 of wall time from spawn to exit.

- ``python -c pass``: the fixed cost (two relay interpreters, bwrap's namespaces and mounts);
- ``import nexus_runner.app``: a runner's own start-up work, for scale.

Without a working bwrap (not Linux, not installed, no user namespaces) only the plain rows
are printed, with the reason.
"""

from __future__ import annotations

import asyncio
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from nexus_scheduler.runtime.confinement import Confinement, Endpoint, probe

ROUNDS = 10
IMPORT_ROUNDS = 3  # a runner's imports take seconds on a busy machine


async def _p50_ms(argv: list[str], env: dict[str, str], rounds: int) -> float:
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        proc = await asyncio.create_subprocess_exec(*argv, env=env)
        code = await proc.wait()
        times.append((time.perf_counter() - start) * 1000)
        if code != 0:
            raise RuntimeError(f"{argv[:3]}... exited {code}")
    return statistics.median(times)


async def run(nats_url: str) -> list[tuple[str, float, str, float]]:
    bwrap = shutil.which("bwrap")
    why = "bwrap is not installed" if bwrap is None else probe(bwrap)
    rows: list[tuple[str, float, str, float]] = []
    host, _, port = nats_url.rpartition("//")[2].rpartition(":")
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        env = {"PATH": "/usr/bin:/bin", "HOME": str(root / "home")}
        for label, command, rounds in (
            ("python -c pass", [sys.executable, "-c", "pass"], ROUNDS),
            (
                "import nexus_runner.app",
                [sys.executable, "-c", "import nexus_runner.app"],
                IMPORT_ROUNDS,
            ),
        ):
            plain = await _p50_ms(command, env, rounds)
            rows.append((f"start+exit {label}, plain, p50 ms", plain, "", 0.0))
            if why is not None or bwrap is None:
                continue
            run_dir = root / "run"
            run_dir.mkdir(exist_ok=True)
            argv = Confinement(bwrap).wrap(
                command,
                run_dir=run_dir,
                writable=[root / "ws", root / "home"],
                endpoints=[Endpoint(host, int(port))],
            )
            confined = await _p50_ms(argv, env, rounds)
            rows.append(
                (f"start+exit {label}, confined, p50 ms", confined, "plain", confined / plain)
            )
    if why is not None:
        print(f"  (confined rows skipped: {why})")
    return rows
