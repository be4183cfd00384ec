"""Leader elections on a real three-node JetStream cluster: a node killed with SIGKILL while
events are published and read loses nothing, stores nothing twice, and logs no traceback."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import json
import logging
import uuid
from collections.abc import AsyncIterator

import nats.errors
import pytest
from nexus_events.contract import subjects
from nexus_events.contract.streams import RUNS
from nexus_events.events import RunHeartbeat
from nexus_events.runtime.health import JetStreamProbe
from nexus_events.transport.bus import Bus, BusSettings, ConsumerSpec, Delivery, Outgoing
from nexus_events.transport.follow import Batch, Feed, StreamFollower
from nexus_testing import NatsCluster, eventually

# Seconds an election may take: nats-server's election timeout is randomised in 4-9 s.
ELECTION = 15.0


class MemoryFollower(StreamFollower):
    """A follower whose checkpoint is a field: it records every stream sequence it applies."""

    def __init__(self, bus: Bus) -> None:
        feed = Feed(RUNS, f"follow_{uuid.uuid4().hex[:8]}")
        super().__init__(bus, [feed], name="memory", batch=200, fetch_timeout=0.5)
        self.applied: list[int] = []

    async def checkpoint(self, feed: Feed) -> int:
        return self.applied[-1] if self.applied else 0

    async def handle(self, feed: Feed, batch: Batch, delivered: int) -> None:
        self.applied.extend(e.envelope.stream_seq or 0 for e in batch.events)


@pytest.fixture
async def cluster_bus(nats_cluster: NatsCluster) -> AsyncIterator[Bus]:
    """A bus on all three nodes, every stream ensured with three replicas."""
    settings = BusSettings(url=nats_cluster.urls, name="test", reconnect_time_wait=0.1)
    bus = await Bus.connect(settings, source="test")
    await nats_cluster.ensure_streams(bus.js)
    try:
        yield bus
    finally:
        await bus.close()


def _heartbeats(run_id: str, n: int) -> list[Outgoing]:
    subject = subjects.run_event(run_id, "heartbeat")
    return [
        Outgoing(subject, RunHeartbeat(seq=i, turn=0, phase="tool"), msg_id=f"{run_id}-{i}")
        for i in range(n)
    ]


async def _stored_ids(bus: Bus) -> list[str]:
    return [(m.headers or {}).get("Nats-Msg-Id", "") async for m in bus.replay_raw(RUNS)]


async def _lead_consumer_on(cluster: NatsCluster, bus: Bus, durable: str, node: int) -> None:
    """Ask the durable's leader to step down in favour of `node` until `node` leads it."""
    stepdown = f"$JS.API.CONSUMER.LEADER.STEPDOWN.{RUNS}.{durable}"
    preferred = json.dumps({"placement": {"preferred": cluster.nodes[node].name}}).encode()

    async def leads() -> bool:
        if cluster.consumer_leader(RUNS, durable) == node:
            return True
        with contextlib.suppress(nats.errors.Error):
            await bus.nc.request(stepdown, preferred, timeout=2)
        return False

    await eventually(leads, within=ELECTION, interval=0.5, what=f"n{node} leading {durable}")


def _tracebacks(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [f"{r.name}: {r.getMessage()}" for r in caplog.records if r.exc_info]


async def test_killing_the_stream_leader_mid_publish_loses_and_repeats_nothing(
    nats_cluster: NatsCluster, cluster_bus: Bus, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    bus = cluster_bus
    seen: collections.Counter[str] = collections.Counter()

    async def handler(batch: list[Delivery]) -> None:
        seen.update(d.envelope.event_id for d in batch)

    # ack_wait short: acks sent to the killed leader are lost and come back as redeliveries.
    spec = ConsumerSpec(stream=RUNS, durable="elections", ack_wait=2.0, fetch_timeout=0.5)
    follower = MemoryFollower(bus)
    await follower.start()
    singles, many = _heartbeats("run_single", 100), _heartbeats("run_many", 1500)
    leader = nats_cluster.stream_leader(RUNS)
    assert leader is not None
    async with bus.consumer(spec, handler):
        # The durable's leader onto the stream's, so the one kill moves both.
        await _lead_consumer_on(nats_cluster, bus, spec.durable, leader)

        async def one_by_one() -> None:
            for i, o in enumerate(singles):
                await bus.publish(o.subject, o.event, msg_id=o.msg_id)
                if i == 10:
                    nats_cluster.kill(leader)  # kill -9, mid-publish of both publishers

        acks, _ = await asyncio.gather(bus.publish_many(many, window=200), one_by_one())
        # Every publish succeeded; each message got its own sequence.
        assert len({a.seq for a in acks}) == len(many)
        expected = {o.msg_id for o in singles + many}
        await eventually(lambda: set(seen) == expected, within=ELECTION, what="all consumed")
        await eventually(lambda: len(follower.applied) >= len(expected), what="all followed")
    await follower.stop()

    new_leader = nats_cluster.stream_leader(RUNS)
    assert new_leader is not None
    assert new_leader != leader
    assert nats_cluster.consumer_leader(RUNS, spec.durable) not in (None, leader)
    stored = await _stored_ids(bus)
    assert len(stored) == len(expected)  # nothing stored twice ...
    assert set(stored) == expected  # ... and nothing lost
    # The follower applied every sequence once, in order, across the repositioning.
    assert follower.applied == list(range(1, len(expected) + 1))
    # A leader change is expected in a cluster: warnings, never a traceback.
    assert _tracebacks(caplog) == []

    # (Restarted nodes rejoining: test_cluster_quorum.)


async def test_killing_the_meta_leader_makes_readiness_drop_and_return(
    nats_cluster: NatsCluster, cluster_bus: Bus, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    bus = cluster_bus
    probe = JetStreamProbe(bus.js, [RUNS], interval=0.05)
    await probe.start()
    follower = MemoryFollower(bus)
    await follower.start()
    try:
        assert probe.ok
        meta = nats_cluster.meta_leader()
        assert meta is not None
        nats_cluster.kill(meta)
        await eventually(lambda: not probe.ok, within=ELECTION, what="not ready in the election")
        # No meta leader: JetStream answers 503 (10008) or not at all while the vote goes on.
        assert probe.problem is not None
        assert "meta leader" in probe.problem.message
        # Publishing goes on through the election (retried with the same ids) ...
        items = _heartbeats("run_meta", 200)
        await bus.publish_many(items)
        # ... readiness returns by itself, and the follower (whose consumer is remade
        # through the meta leader) applies everything.
        await eventually(lambda: probe.ok, within=ELECTION, what="ready after the election")
        await eventually(lambda: len(follower.applied) == len(items), within=ELECTION)
        assert not follower.stuck
        assert nats_cluster.meta_leader() not in (None, meta)
    finally:
        await follower.stop()
        await probe.stop()
    assert len(await _stored_ids(bus)) == len(items)
    assert _tracebacks(caplog) == []
