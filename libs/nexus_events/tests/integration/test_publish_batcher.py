"""`PublishBatcher` against a real nats-server: concurrent single publishes go out in a few
batches, each caller gets its own ack, and a refused message fails only its own caller."""

from __future__ import annotations

import asyncio

import pytest
from nats.js.api import PubAck
from nexus_events.contract import subjects
from nexus_events.contract.codec import Encoded
from nexus_events.contract.streams import RUNS
from nexus_events.errors import PublishRejected
from nexus_events.events import RunHeartbeat
from nexus_events.transport.bus import Bus, BusSettings
from nexus_events.transport.publish_batcher import PublishBatcher


def heartbeat(bus: Bus, run_id: str, seq: int = 1) -> Encoded:
    return bus.encode(
        subjects.run_event(run_id, "heartbeat"), RunHeartbeat(seq=seq), msg_id=f"hb:{run_id}"
    )


async def test_a_burst_of_single_publishes_goes_out_in_a_few_batches(bus: Bus) -> None:
    batcher = PublishBatcher(bus)
    acks = await asyncio.gather(*(batcher.publish(heartbeat(bus, f"r{i}")) for i in range(300)))

    assert sorted(a.seq for a in acks) == list(range(1, 301))
    assert not any(a.duplicate for a in acks)
    # The first goes alone; the rest were handed over while it was in flight.
    assert batcher.batches <= 3
    # Each caller got the ack of its own message.
    for i, ack in enumerate(acks):
        msg = await bus.js.get_msg(RUNS, ack.seq)
        assert msg.subject == subjects.run_event(f"r{i}", "heartbeat")
    # The message ids were kept: the same events again are duplicates, stored once.
    again = await asyncio.gather(*(batcher.publish(heartbeat(bus, f"r{i}")) for i in range(300)))
    assert all(a.duplicate for a in again)
    assert (await bus.js.stream_info(RUNS)).state.messages == 300


async def test_a_refused_message_fails_its_own_caller_only(nats_url: str, bus: Bus) -> None:
    # Short waits: the batch fails on its deadline (nats-py never settles a refused message).
    settings = BusSettings(url=nats_url, publish_timeout=0.5, publish_deadline=1.0)
    short = await Bus.connect(settings, source="test")
    batcher = PublishBatcher(short)
    good = heartbeat(bus, "good")
    # JetStream refuses a message whose expected stream is another one (err_code 10060).
    bad = heartbeat(bus, "bad")
    refused = Encoded(bad.subject, bad.body, {**bad.headers, "Nats-Expected-Stream": "NOPE"})
    later = heartbeat(bus, "later")

    outcomes = await asyncio.gather(
        batcher.publish(good), batcher.publish(refused), batcher.publish(later),
        return_exceptions=True,
    )  # fmt: skip

    await short.close()
    assert isinstance(outcomes[1], PublishRejected)
    assert "expected stream does not match" in str(outcomes[1])
    acks = [o for o in (outcomes[0], outcomes[2]) if isinstance(o, PubAck)]
    stored = [(await bus.js.get_msg(RUNS, a.seq)).subject for a in acks]
    assert stored == [good.subject, later.subject]
    assert (await bus.js.stream_info(RUNS)).state.messages == 2


async def test_a_cancelled_caller_does_not_stop_the_others(bus: Bus) -> None:
    batcher = PublishBatcher(bus)
    first = asyncio.create_task(batcher.publish(heartbeat(bus, "first")))
    cancelled = asyncio.create_task(batcher.publish(heartbeat(bus, "cancelled")))
    kept = asyncio.create_task(batcher.publish(heartbeat(bus, "kept")))
    await asyncio.sleep(0)
    cancelled.cancel()

    ack = await kept
    await first
    with pytest.raises(asyncio.CancelledError):
        await cancelled
    await batcher.close()
    assert (await bus.js.get_msg(RUNS, ack.seq)).subject == subjects.run_event("kept", "heartbeat")
