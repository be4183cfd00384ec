"""KV buckets follow NEXUS_STREAMS_REPLICAS on a real JetStream cluster: a lease bucket and the
approvals bucket created at R1 are raised to R3 in place (the key kept) when a user with R3
opens them, and a user with R1 never shrinks them back."""

from __future__ import annotations

import asyncio
import time

import nats.errors
import nats.js.errors
from nats.js import JetStreamContext
from nexus_events.runtime.lease import Lease
from nexus_events.transport.approvals import APPROVALS_BUCKET, approvals_bucket
from nexus_events.transport.bus import Bus, BusSettings
from nexus_testing import NatsCluster, eventually


async def _replicas(js: JetStreamContext, stream: str) -> int:
    return (await js.stream_info(stream)).config.num_replicas or 1


async def _acquire(lease: Lease) -> bool:
    """`lease.acquire()`, tried again while the cluster has no leader for a stream just made
    or edited (no responders, no stream response: a loaded full run), as the leadership
    campaign tries its next round; any other error fails the test."""
    deadline = time.monotonic() + 15
    while True:
        try:
            return await lease.acquire()
        except (nats.errors.NoRespondersError, nats.js.errors.NoStreamResponseError, TimeoutError):
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.2)


async def _raised_to_r3(js: JetStreamContext, stream: str) -> None:
    # The edit is acknowledged before every server's stream info says so: under load a read
    # right after it still answered R1 (a full suite run).
    await eventually(lambda: _replicas(js, stream), lambda n: n == 3, what=f"{stream} at R3")


async def test_buckets_made_at_r1_follow_the_streams_to_r3(nats_cluster: NatsCluster) -> None:
    bus = await Bus.connect(BusSettings(url=nats_cluster.urls), source="test")
    js = bus.nc.jetstream(timeout=5)
    try:
        first = Lease(js, "nexus_test_lease", "a", ttl=30, replicas=1)
        assert await _acquire(first)
        assert await _replicas(js, "KV_nexus_test_lease") == 1

        # Another replica, started with NEXUS_STREAMS_REPLICAS=3: the bucket is edited to
        # R3 in place; the key (the first holder's lease) is kept, so it cannot take it.
        second = Lease(js, "nexus_test_lease", "b", ttl=30, replicas=3)
        assert not await _acquire(second)
        await _raised_to_r3(js, "KV_nexus_test_lease")
        assert second.owner == "a"
        assert await first.renew()
        await eventually(
            lambda: js.stream_info("KV_nexus_test_lease"),
            lambda i: i.cluster is not None and len(i.cluster.replicas or []) == 2,
            what="two followers beside the leader",
        )
        # A client left at R1 (the CLI's default) does not shrink it.
        await _acquire(Lease(js, "nexus_test_lease", "c", ttl=30, replicas=1))
        assert await _replicas(js, "KV_nexus_test_lease") == 3

        await approvals_bucket(js, replicas=1)
        assert await _replicas(js, f"KV_{APPROVALS_BUCKET}") == 1
        await approvals_bucket(js, replicas=3)
        await _raised_to_r3(js, f"KV_{APPROVALS_BUCKET}")
        await approvals_bucket(js, replicas=1)
        assert await _replicas(js, f"KV_{APPROVALS_BUCKET}") == 3
    finally:
        await bus.close()
