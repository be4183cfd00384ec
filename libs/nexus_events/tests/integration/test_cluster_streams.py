"""`ensure_streams` on a real JetStream cluster: replicas created, scaled in place, refused
with a message naming the setting when the servers cannot hold them."""

from __future__ import annotations

import pytest
from nexus_events.contract import subjects
from nexus_events.contract.streams import RUNS, StreamSettings, ensure_streams, stream_configs
from nexus_events.errors import BusError, StreamDrift
from nexus_events.events import RunHeartbeat
from nexus_events.transport.bus import Bus, BusSettings
from nexus_testing import NatsCluster, eventually


async def test_an_r1_stream_is_scaled_to_three_replicas_in_place(
    nats_cluster: NatsCluster,
) -> None:
    bus = await Bus.connect(BusSettings(url=nats_cluster.urls), source="test")
    try:
        created = await ensure_streams(bus.js, StreamSettings(replicas=1))
        assert len(created.created) == len(stream_configs())
        await bus.publish(subjects.run_event("run_r", "heartbeat"), RunHeartbeat(seq=1))

        # A service that does not own the settings reports the difference, changes nothing.
        left = await ensure_streams(bus.js, StreamSettings(replicas=3), update=False)
        assert left.left[RUNS] == {"num_replicas": (1, 3)}
        assert (await bus.js.stream_info(RUNS)).config.num_replicas == 1

        # The owner scales every stream to R3, keeping what it stored.
        scaled = await ensure_streams(bus.js, StreamSettings(replicas=3))
        assert scaled.updated[RUNS] == {"num_replicas": (1, 3)}
        info = await bus.js.stream_info(RUNS)
        assert info.config.num_replicas == 3
        assert info.state.messages == 1
        await eventually(
            lambda: bus.js.stream_info(RUNS),
            lambda i: i.cluster is not None and len(i.cluster.replicas or []) == 2,
            what="two followers beside the leader",
        )
        assert (await ensure_streams(bus.js, StreamSettings(replicas=3))).unchanged

        # More replicas than nodes: refused, naming the setting, the stream left as it is.
        with pytest.raises(StreamDrift, match="NEXUS_STREAMS_REPLICAS=5 needs a JetStream"):
            await ensure_streams(bus.js, StreamSettings(replicas=5))
        assert (await bus.js.stream_info(RUNS)).config.num_replicas == 3
    finally:
        await bus.close()


async def test_replicas_on_a_server_that_is_not_clustered_are_refused_clearly(
    nats_url: str,
) -> None:
    bus = await Bus.connect(BusSettings(url=nats_url), source="test")
    try:
        with pytest.raises(BusError, match=r"non-clustered mode.*NEXUS_STREAMS_REPLICAS=3"):
            await ensure_streams(bus.js, StreamSettings(replicas=3))
    finally:
        await bus.close()
