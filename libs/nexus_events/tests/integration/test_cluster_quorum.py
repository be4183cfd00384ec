"""Quorum loss on a real three-node JetStream cluster: with two nodes gone writes stop with
an error naming the cause, readiness says so, and once the nodes are back everything
resumes by itself and a publish retried with the same id is stored once."""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import AsyncIterator

import pytest
from nats.js.api import PubAck
from nexus_events.contract import subjects
from nexus_events.contract.streams import RUNS, storage_problem
from nexus_events.errors import NoQuorum
from nexus_events.events import RunHeartbeat
from nexus_events.runtime.health import JetStreamProbe
from nexus_events.transport.bus import Bus, BusSettings
from nexus_testing import NatsCluster, eventually

from .test_cluster_elections import ELECTION, MemoryFollower

# A short publish deadline: the test waits it out once.
DEADLINE = 1.0


@pytest.fixture
async def cluster_bus(nats_cluster: NatsCluster) -> AsyncIterator[Bus]:
    settings = BusSettings(
        url=nats_cluster.urls,
        name="test",
        reconnect_time_wait=0.1,
        publish_timeout=0.5,
        publish_deadline=DEADLINE,
    )
    bus = await Bus.connect(settings, source="test")
    # Not the bus's own context: its 0.5 s API timeout is for the test's publishes.
    await nats_cluster.ensure_streams(bus.nc.jetstream(timeout=5))
    try:
        yield bus
    finally:
        await bus.close()


async def test_without_quorum_writes_stop_with_the_cause_and_resume_after(
    nats_cluster: NatsCluster, cluster_bus: Bus, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    bus = cluster_bus
    subject = subjects.run_event("run_q", "heartbeat")
    acked = [await bus.publish(subject, RunHeartbeat(seq=i), msg_id=f"q-{i}") for i in range(5)]
    # Stopped whatever happens: left running, they kept the failed test from ending.
    stack = contextlib.AsyncExitStack()
    probe = JetStreamProbe(bus.js, [RUNS], interval=0.05)
    await probe.start()
    stack.push_async_callback(probe.stop)
    follower = MemoryFollower(bus)
    await follower.start()
    stack.push_async_callback(follower.stop)
    async with stack:
        await _lose_and_regain_quorum(nats_cluster, bus, probe, follower, acked)
    assert [r.getMessage() for r in caplog.records if r.exc_info] == []


async def _lose_and_regain_quorum(
    nats_cluster: NatsCluster,
    bus: Bus,
    probe: JetStreamProbe,
    follower: MemoryFollower,
    acked: list[PubAck],
) -> None:
    subject = subjects.run_event("run_q", "heartbeat")
    await eventually(lambda: len(follower.applied) == len(acked))

    # Two of three nodes gone: no stream and no meta group can elect a leader. The node kept
    # leads nothing (a leader left alone keeps calling itself leader for ~5 s before it
    # notices, and a publish failing in that window gets the plain PublishFailed).
    leaders = {nats_cluster.stream_leader(RUNS), nats_cluster.meta_leader()}
    survivor = next(n for n in range(3) if n not in leaders)
    for node in range(3):
        if node != survivor:
            nats_cluster.kill(node)
    # The node left alone answers nothing for its first seconds (like an election), then
    # says it has no quorum; from then on a publish that gets no ack raises NoQuorum.
    await eventually(
        lambda: storage_problem(bus.js, RUNS),
        lambda p: p is not None and p.quorum,
        within=ELECTION,
        what="the cluster reports no quorum",
    )
    started = time.monotonic()
    with pytest.raises(NoQuorum) as raised:
        await bus.publish(subject, RunHeartbeat(seq=99), msg_id="q-unacked")
    assert time.monotonic() - started < DEADLINE + 3  # bounded: deadline + a diagnosis
    assert raised.value.stream == RUNS
    assert "no quorum for NEXUS_RUNS" in str(raised.value) or "no meta leader" in str(raised.value)
    await eventually(lambda: not probe.ok, what="not ready without quorum")
    # The follower is not asked to go stuck here: its ack-less consumer (one replica) lives
    # on one node, and where that is the survivor its fetches just come back empty (failed
    # 2 of 3 runs on a busy machine). The probe is what reports the outage; the follower must
    # apply everything, once and in order, when the quorum is back (below).
    assert follower.applied == list(range(1, len(acked) + 1))

    # The nodes come back: leaders are elected, readiness returns, nothing was restarted.
    for node in range(3):
        nats_cluster.start(node)
    nats_cluster.wait_ready(within=ELECTION)
    await eventually(lambda: probe.ok, within=ELECTION, what="ready with quorum back")
    await eventually(lambda: storage_problem(bus.js, RUNS), lambda p: p is None, within=ELECTION)
    # The unacked publish may have reached the log before the leader stepped down; retried
    # with its id it is stored exactly once either way. Retried with the usual publish
    # deadline: the test bus' 1 s one can pass while the new leaders settle (it did).
    settings = BusSettings(url=nats_cluster.urls, name="test-retry")
    retrier = await Bus.connect(settings, source="test")
    try:
        retried = await retrier.publish(subject, RunHeartbeat(seq=99), msg_id="q-unacked")
    finally:
        await retrier.close()
    ids = [(m.headers or {}).get("Nats-Msg-Id") async for m in bus.replay_raw(RUNS)]
    assert ids == [f"q-{i}" for i in range(5)] + ["q-unacked"]
    assert retried.seq == len(ids)
    await eventually(lambda: follower.applied == list(range(1, len(ids) + 1)), within=ELECTION)
    assert not follower.stuck
