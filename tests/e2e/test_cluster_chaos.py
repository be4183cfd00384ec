"""Issue 27's acceptance on a real three-node JetStream cluster: `nexus dev up --cluster 3
--offline-model` (three nats-server processes routed on loopback, every stream and bucket
with three replicas, every service given the three URLs).

Two rounds of five live runs: in the first the node leading NEXUS_RUNS is SIGKILLed, in the
second the JetStream meta leader. From the streams: every run completes with one terminal
event, no gap or repeat in the runner's numbered event ids, core's projections equal a
rebuild, nothing new in the DLQ; the killed node is restarted by the supervisor and its
replicas report current again. The logic is scripts/chaos_cluster.py (its long version:
`uv run python -m scripts.chaos_cluster`); its checks are tested on hand-made streams first,
so a broken checker cannot pass the chaos test vacuously. Then a second core, started with
the supervised core's environment, keeps runs projected when the supervised core is
SIGKILLed (and, the supervisor being stopped meanwhile, not restarted); with core's KV lease
it must also report itself the lease holder.

The stack is this module's own: killing NATS nodes and core under the other end-to-end tests
would make them flaky.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
from nexus_cli.devstack.nats_auth import without_credentials
from nexus_events.contract import subjects
from nexus_events.contract.streams import RUNS
from nexus_events.transport.bus import Bus, BusSettings
from nexus_testing import eventually_blocking

from scripts import chaos_cluster as cc
from scripts.chaos_flows import cli
from tests.e2e.conftest import Stack, e2e_env
from tests.support import devstack

NODES = 3
RUNS_PER_ROUND = 5
CHAT_AGENT = """\
id: cluster-chat
role: custom
description: One quick turn, for the core takeover check.
model: {name: gpt-4o-mini}
system_prompt: "[offline-model:chat] Say hello."
tools: [finish]
"""


@pytest.fixture(scope="module")
def cluster_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    tmp = tmp_path_factory.mktemp("cluster")
    env = e2e_env(tmp)
    # Each round kills a node with all five of its runs live, so they must start together:
    # with a warm pool smaller than a round, one warm-started run could end before the cold
    # ones have had a turn. The pool has tests of its own (and the dev-stack group runs it).
    env["NEXUS_WARM_POOL"] = '{"default": 0}'

    def clustered(up: devstack.Result) -> None:
        data = up.json()
        assert data["cluster_size"] == NODES
        assert [n["name"] for n in data["nats_nodes"]] == ["nats-1", "nats-2", "nats-3"]
        # Every node's URL, each with the operators' credentials (the nodes share the users).
        plain, user, _ = without_credentials(data["nats_url"])
        assert plain == ",".join(n["url"] for n in data["nats_nodes"])
        assert user == "admin"

    # The end-to-end Stack: its leak check at teardown covers runners too.
    stack = Stack(tmp / ".nexus", tmp, env)
    yield from devstack.running(
        stack, "--cluster", str(NODES), "--offline-model", check_up=clustered
    )


async def _runs_stream(nats_url: str) -> Any:
    bus = await Bus.connect(BusSettings(url=nats_url, connect_attempts=1), source="test")
    try:
        return await bus.js.stream_info(RUNS)
    finally:
        await bus.close()


# Two rounds take ~45 s here (runner start-ups, two elections of ~5 s, two rejoins of ~7 s).
@pytest.mark.timeout(240)
def test_kill_9_the_runs_leader_then_the_meta_leader_with_5_runs_live(
    cluster_stack: Stack, tmp_path: Path
) -> None:
    info = asyncio.run(_runs_stream(cluster_stack.state()["nats_url"]))
    assert info.config.num_replicas == NODES
    assert info.cluster is not None
    assert len(info.cluster.replicas or []) == NODES - 1

    nexus = cli(cluster_stack.env, cluster_stack.cwd)
    figures = asyncio.run(
        cc.run_chaos(
            cluster_stack.home, nexus, tmp_path, rounds=2, runs=RUNS_PER_ROUND, seed=27, wait=90
        )
    )
    cluster_stack.remember_processes()  # the restarted nodes too: teardown checks they stop
    report = "\n".join(figures.lines())
    print(report)
    assert [k.target for k in figures.kills] == ["runs-leader", "meta-leader"], report
    assert [k.live for k in figures.kills] == [RUNS_PER_ROUND, RUNS_PER_ROUND], report
    for kill in figures.kills:
        assert kill.elected is not None, report
        assert kill.restarted is not None, report
        assert kill.rejoined is not None, report
    assert not figures.not_terminal, report
    assert figures.completed == 2 * RUNS_PER_ROUND, report
    assert not figures.failures(), report  # terminal events, ids, projections, attempts
    assert not figures.dead_letters, report
    assert figures.projections_compared >= 2 * RUNS_PER_ROUND, report
    assert figures.ok, report

    # `dev status` lists the three nodes, healthy, one of them the meta leader, and the
    # restarts of the killed ones.
    status = cluster_stack.nexus("dev", "status", "-o", "json")
    assert status.code == 0, status.stderr
    nodes = {s["name"]: s for s in status.json()["services"] if s["name"].startswith("nats")}
    assert sorted(nodes) == ["nats-1", "nats-2", "nats-3"]
    assert all(n["health"].startswith("healthy") for n in nodes.values()), nodes
    assert sum(n["health"] == "healthy (meta leader)" for n in nodes.values()) == 1, nodes
    for kill in figures.kills:
        assert nodes[kill.node]["restarts"] >= 1, nodes
        assert nodes[kill.node]["pid"] != kill.pid


@pytest.mark.timeout(180)
def test_a_second_core_keeps_runs_projected_when_the_first_is_killed(
    cluster_stack: Stack, tmp_path: Path
) -> None:
    (tmp_path / "chat.yaml").write_text(CHAT_AGENT)
    applied = cluster_stack.nexus("agents", "apply", "-f", str(tmp_path / "chat.yaml"))
    assert applied.code == 0, applied.stderr
    replica = devstack.start_replica(cluster_stack, "core", "nexus_core")
    state = cluster_stack.state()
    supervisor = psutil.Process(state["supervisor"]["pid"])
    core = psutil.Process(state["services"]["core"]["pid"])
    try:
        eventually_blocking(replica.ready, within=60, what="the second core to be ready")
        # Stopped, the supervisor cannot restart the killed core: only the second one is left.
        supervisor.suspend()
        try:
            core.kill()
            # Nobody reaps it while its parent is stopped: gone or a zombie is dead.
            eventually_blocking(lambda: _dead(core), within=10, what="the core to die")
            started = time.monotonic()
            run_ids = [f"takeover-{i}" for i in range(2)]
            for run_id in run_ids:
                asked = cluster_stack.nexus(
                    "run", "cluster-chat", "--input", "hello", "--run-id", run_id, "--bg"
                )
                assert asked.code == 0, asked.stderr
            for run_id in run_ids:
                eventually_blocking(
                    lambda r=run_id: cluster_stack.status(r),
                    lambda s: s == "completed",
                    within=90,
                    what=f"{run_id} projected as completed by the second core",
                )
            print(f"runs requested after the kill projected in {time.monotonic() - started:.1f}s")
            assert replica.proc.poll() is None, replica.log.read_text()[-2000:]
            # With core's projection lease (docs/cluster.md, "Two replicas of core and
            # memory") the only core left holds it; a core of before the lease says nothing.
            leadership = asyncio.run(_leadership(cluster_stack.state()["nats_url"]))
            print(f"core's leadership after the kill: {leadership}")
            if leadership is not None:
                assert leadership["role"] == "leader", leadership
                assert f"/{replica.proc.pid}/" in leadership["holder"], leadership
            # Stopped before the supervised core comes back: without a lease, a core starting
            # re-creates the projection consumers under the other's feet.
            code = replica.stop()
        finally:
            supervisor.resume()
    finally:
        replica.stop()
    log = replica.log.read_text()
    assert code == 0, f"the second core exited {code}: {log[-3000:]}"
    assert "Traceback" not in log, log[-3000:]
    # The supervisor, running again, restarts the core it lost (teardown's `dev down` then
    # stops it with the rest).
    eventually_blocking(
        lambda: cluster_stack.state()["services"]["core"],
        lambda e: e["pid"] != core.pid and e["state"] == "running",
        within=30,
        what="the supervisor to restart the killed core",
    )


async def _leadership(nats_url: str) -> dict[str, Any] | None:
    """The `leadership` part of core's projections.status reply, if it has one."""
    bus = await Bus.connect(BusSettings(url=nats_url, connect_attempts=1), source="test")
    try:
        reply = await bus.nc.request(subjects.CORE_PROJECTIONS_STATUS, b"{}", timeout=10)
    finally:
        await bus.close()
    leadership = json.loads(reply.data).get("leadership")
    return leadership if isinstance(leadership, dict) else None


def _dead(proc: psutil.Process) -> bool:
    try:
        return proc.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


# The checker, on streams written by hand.


def _stored(run_id: str, events: list[tuple[str, str | None, dict[str, Any]]]) -> list[cc.Stored]:
    return [
        cc.Stored(seq, f"nexus.agent.run.v1.{run_id}.{name}", msg_id, body)
        for seq, (name, msg_id, body) in enumerate(events, start=1)
    ]


def _runner(run_id: str, n: int, name: str, **body: Any) -> tuple[str, str, dict[str, Any]]:
    return name, f"{run_id}:1:{name}:{n}", body


def _clean_run(run_id: str) -> list[tuple[str, str | None, dict[str, Any]]]:
    result = {"details": {"seen": {"a": True}, "journal": ["step 2"]}}
    return [
        ("requested", f"chaos:requested:{run_id}", {}),
        ("dispatched", f"dispatched:{run_id}:1", {"attempt": 1, "handle": "1"}),
        _runner(run_id, 1, "started"),
        *[_runner(run_id, n, "turn", turn=n - 1) for n in range(2, 2 + cc.cr.SCRIPT_TURNS)],
        _runner(run_id, 2 + cc.cr.SCRIPT_TURNS, "completed", reason="succeeded", result=result),
    ]


def test_checker_passes_a_clean_run() -> None:
    figures = cc.Figures(runs=1, seed=0)
    cc.check_runs(figures, ["x-k1r00"], _stored("x-k1r00", _clean_run("x-k1r00")))
    assert figures.failures() == []
    assert figures.completed == 1
    assert not figures.not_terminal


def test_checker_finds_a_gap_and_a_repeat_in_the_runners_ids() -> None:
    events = _clean_run("x-k1r00")
    del events[5]  # runner event n=4 never stored
    events.insert(7, events[6])  # one stored twice
    problems = cc.check_ids("x-k1r00", _stored("x-k1r00", events))
    assert any("miss ids [4]" in p for p in problems), problems
    assert any("stored 2 times" in p for p in problems), problems
    assert cc.check_ids("x-k1r01", _stored("x-k1r01", [("requested", "r", {})])) == [
        "x-k1r01: no runner events"
    ]


def test_checker_wants_one_completed_terminal_event_and_one_attempt() -> None:
    run = _clean_run("x-k1r00")
    run.append(_runner("x-k1r00", 99, "lost", reason="runtime_gone"))
    figures = cc.Figures(runs=2, seed=0)
    resumed = [
        *_clean_run("x-k1r01")[:4],
        ("dispatched", "d2", {"attempt": 2, "handle": "2"}),
        ("failed", "f", {"reason": "error"}),
    ]
    stored = _stored("x-k1r00", run) + _stored("x-k1r01", resumed)
    stored.append(cc.Stored(99, "nexus.agent.run.v1.x-k1r02.requested", "q", {}))
    cc.check_runs(figures, ["x-k1r00", "x-k1r01", "x-k1r02"], stored)
    problems = figures.failures()
    assert "x-k1r00: 2 terminal events: ['completed', 'lost']" in problems
    assert "x-k1r01: 2 attempts: a runner was lost in the election" in problems
    assert "x-k1r01: ended failed/error" in problems
    assert figures.not_terminal == ["x-k1r02: last events ['requested']"]
    assert figures.completed == 1
    assert not figures.ok


def test_up_with_another_cluster_size_leaves_the_stack_alone(cluster_stack: Stack) -> None:
    other = cluster_stack.process("dev", "up", "--cluster", "1")
    assert other.code == 2, other.stderr
    assert "runs a cluster of 3 NATS nodes, not 1" in other.stderr
    assert cluster_stack.state()["status"] == "ready"
