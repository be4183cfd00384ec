"""`nexus` against a JetStream cluster that lost quorum: commands that publish fail on one
line naming the cause, exit 4, within a bounded time; once quorum is back, a retried
command stores its request once. The CLI runs as real processes on a real cluster."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from pathlib import Path

from nexus_events.contract.streams import CATALOG, RUNS, storage_problem
from nexus_events.transport.bus import Bus, BusSettings
from nexus_testing import NatsCluster, eventually
from tests.support.cli import cli_env, nexus

from nexus_cli.errors import ExitCode

PLANNER = Path(__file__).parents[3] / "examples" / "agents" / "planner.yaml"
# Seconds a failing command may take: its publish deadline (5 s with --timeout 1), one
# diagnosis (at most 2 s), and the interpreter's start-up, which took up to ~10 s with the
# two cores at load 18. Well under what a hung command would take (the old 30 s deadline).
BOUNDED = 25.0
ELECTION = 15.0


async def _nexus(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "nexus_cli", "--timeout", "1", *args],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=60,
    )


async def test_without_quorum_commands_fail_on_one_line_and_a_retry_stores_once(
    nats_cluster: NatsCluster, tmp_path: Path
) -> None:
    bus = await Bus.connect(BusSettings(url=nats_cluster.urls), source="test")
    try:
        await nats_cluster.ensure_streams(bus.js)
    finally:
        await bus.close()
    env = cli_env(nats_cluster.urls, tmp_path)
    # Keep a node that leads nothing: the streams and the meta group lose their leaders.
    leaders = {nats_cluster.stream_leader(RUNS), nats_cluster.meta_leader()}
    survivor = next(n for n in range(3) if n not in leaders)
    for node in range(3):
        if node != survivor:
            nats_cluster.kill(node)

    started = time.monotonic()
    run, apply = await asyncio.gather(
        _nexus(env, "run", "planner", "--run-id", "run_quorum", "--bg"),
        _nexus(env, "agents", "apply", "-f", str(PLANNER), "--no-wait"),
    )
    assert time.monotonic() - started < BOUNDED
    for result, stream in ((run, RUNS), (apply, CATALOG)):
        assert result.returncode == ExitCode.UNAVAILABLE, result.stderr
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1, result.stderr  # one line, no traceback
        # The cause: "no quorum for <stream>" once the node left alone has seen its peers go
        # (~7-9 s), before that "no stream or meta leader reachable (... quorum)".
        assert lines[0].startswith("error: ")
        assert stream in lines[0]
        assert "quorum" in lines[0]
    assert "retry with --run-id run_quorum" in run.stderr

    for node in range(3):
        nats_cluster.start(node)
    nats_cluster.wait_ready(within=ELECTION)
    bus = await Bus.connect(BusSettings(url=nats_cluster.urls), source="test")
    try:
        await eventually(
            lambda: storage_problem(bus.js, RUNS), lambda p: p is None, within=ELECTION
        )
        # The retry in this process (typer's runner): no second interpreter start-up.
        retried = await nexus(
            nats_cluster.urls, tmp_path, "run", "planner", "--run-id", "run_quorum", "--bg"
        )
        assert retried.exit_code == ExitCode.OK, retried.output
        requested = [m async for m in bus.replay_raw(RUNS)]
        # Whether or not the failed attempt reached the log, the request is there once.
        assert [m.subject for m in requested] == ["nexus.agent.run.v1.run_quorum.requested"]
    finally:
        await bus.close()
