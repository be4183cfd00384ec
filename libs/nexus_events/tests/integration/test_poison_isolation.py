"""One bad message fails alone, and a message that cannot be dead-lettered stops nothing.

Against a real nats-server: a handler that fails on one message of a batch, a dead letter the
DLQ refuses (its stream's max_msg_size set below the letter), a follower in front of such a
message, and a publish on a closed connection.
"""

from __future__ import annotations

import hashlib
import os
import time
import uuid

import pytest
from nexus_events.contract import subjects
from nexus_events.contract.streams import DLQ, RUNS
from nexus_events.errors import BusUnavailable
from nexus_events.events import RunHeartbeat
from nexus_events.transport.bus import Bus, ConsumerSpec, Delivery
from nexus_events.transport.dead_letters import build_dead_letter
from nexus_events.transport.follow import Batch, Feed, StreamFollower
from nexus_testing import dead_letters, eventually


def spec(**overrides) -> ConsumerSpec:
    values = {"stream": RUNS, "durable": f"t-{uuid.uuid4().hex[:10]}", "fetch_timeout": 0.3}
    values.update(overrides)
    return ConsumerSpec(**values)


async def _limit_dlq_message_size(bus: Bus, size: int) -> None:
    config = (await bus.js.stream_info(DLQ)).config
    config.max_msg_size = size
    await bus.js.update_stream(config)


async def test_a_failing_message_fails_alone_in_its_batch(bus: Bus):
    """Before: one exception naked the whole batch, so after max_deliver every neighbour of
    the bad message was dead-lettered with it."""
    acks = [
        await bus.publish(subjects.run_event("run_iso", "heartbeat"), RunHeartbeat(seq=i))
        for i in range(6)
    ]
    handled: list[int] = []

    async def handler(batch: list[Delivery]) -> None:
        for d in batch:
            if d.event.seq == 3:
                raise RuntimeError("seq 3 is poison for this handler")
        handled.extend(d.event.seq for d in batch)

    s = spec(batch=6, backoff=(0.1,), max_deliver=3)
    async with bus.consumer(s, handler) as consumer:
        letters = await eventually(lambda: dead_letters(bus), what="a dead letter")
        await eventually(lambda: consumer.processed >= 6, what="the batch settled")
        info = await eventually(lambda: _settled(bus, s), what="every message acked or terminated")
    assert sorted(set(handled)) == [0, 1, 2, 4, 5]
    [letter] = letters
    assert letter.stream_seq == acks[3].seq
    assert letter.reason == "max_deliver"
    assert "seq 3 is poison" in letter.error
    assert info.num_ack_pending == 0
    assert consumer.dead_lettered == 1


async def _settled(bus: Bus, s: ConsumerSpec):
    info = await bus.js.consumer_info(s.stream, s.durable)
    return info if (info.num_ack_pending or 0) == 0 and (info.num_pending or 0) == 0 else None


async def test_a_huge_poison_message_is_dead_lettered_truncated(bus: Bus):
    blob = os.urandom(900 * 1024)
    ack = await bus.js.publish(subjects.run_event("run_huge", "turn"), blob)
    after = await bus.publish(subjects.run_event("run_huge", "heartbeat"), RunHeartbeat(seq=1))
    seen: list[int] = []

    async def handler(batch: list[Delivery]) -> None:
        seen.extend(d.envelope.stream_seq or 0 for d in batch)

    s = spec()
    async with bus.consumer(s, handler):
        [letter] = await eventually(lambda: dead_letters(bus), what="the dead letter")
        await eventually(lambda: seen == [after.seq], what="the good message handled")
    assert letter.stream_seq == ack.seq
    assert letter.body_truncated
    assert letter.body_size == len(blob)
    assert letter.body_sha256 == hashlib.sha256(blob).hexdigest()
    assert len(letter.body) < 100_000


async def test_a_letter_the_dlq_refuses_is_kept_as_a_reference(bus: Bus):
    await _limit_dlq_message_size(bus, 2048)
    body = b"\xff" * 10_000
    ack = await bus.js.publish(subjects.run_event("run_ref", "turn"), body)
    assert await bus.file_dead_letter(
        build_dead_letter(
            service=bus.source,
            subject=subjects.run_event("run_ref", "turn"),
            data=body,
            headers={"X-Big": "v" * 5000},
            reason="undecodable",
            error="not JSON",
            consumer="c",
            stream=RUNS,
            stream_seq=ack.seq,
            num_delivered=1,
        )
    )
    [letter] = await dead_letters(bus)
    assert letter.body == ""
    assert letter.headers == {}
    assert letter.body_truncated
    assert letter.headers_truncated
    assert letter.body_size == len(body)
    assert letter.body_sha256 == hashlib.sha256(body).hexdigest()
    assert (letter.stream, letter.stream_seq) == (RUNS, ack.seq)


class _Recording(StreamFollower):
    """Follows NEXUS_RUNS with an in-memory checkpoint; records what it applied."""

    def __init__(self, bus: Bus) -> None:
        super().__init__(bus, [Feed(RUNS, f"f-{uuid.uuid4().hex[:8]}")], name="rec", batch=10)
        self.applied: list[int] = []
        self.position = 0

    async def checkpoint(self, feed: Feed) -> int:
        return self.position

    async def handle(self, feed: Feed, batch: Batch, delivered: int) -> None:
        await self.dead_letter_poison(feed, batch)
        self.applied.extend(e.envelope.stream_seq or 0 for e in batch.events)
        self.position = batch.last_seq


async def test_a_follower_goes_past_a_message_it_cannot_dead_letter(bus: Bus):
    """Even a reference-only letter is refused here (max_msg_size 64): the follower logs
    the original's position, counts it, and keeps applying what follows."""
    await _limit_dlq_message_size(bus, 64)
    bad = await bus.js.publish(subjects.run_event("run_nodlq", "turn"), b"\xff\xfe")
    good = [
        (await bus.publish(subjects.run_event("run_nodlq", "heartbeat"), RunHeartbeat(seq=i))).seq
        for i in range(3)
    ]
    follower = _Recording(bus)
    await follower.start()
    try:
        await eventually(lambda: follower.applied == good, what="the good events applied")
    finally:
        await follower.stop()
    assert follower.poison_undeliverable == 1
    assert follower.position == good[-1] > bad.seq
    assert not follower.stuck
    assert await dead_letters(bus) == []


class _Failing(StreamFollower):
    def __init__(self, bus: Bus) -> None:
        super().__init__(
            bus, [Feed(RUNS, f"f-{uuid.uuid4().hex[:8]}")], name="failing", fetch_timeout=0.1
        )

    async def checkpoint(self, feed: Feed) -> int:
        return 0

    async def handle(self, feed: Feed, batch: Batch, delivered: int) -> None:
        raise RuntimeError("the store rejects everything")


async def test_a_follower_that_keeps_failing_reports_itself_stuck(bus: Bus, monkeypatch):
    import nexus_events.transport.follow as follow

    # The restart pause is 2 s in production; the count, not the pause, is under test.
    original = follow.StreamFollower._pause

    async def short_pause(self, seconds: float) -> None:
        await original(self, min(seconds, 0.05))

    monkeypatch.setattr(follow.StreamFollower, "_pause", short_pause)
    await bus.publish(subjects.run_event("run_stuck", "heartbeat"), RunHeartbeat(seq=1))
    follower = _Failing(bus)
    started = time.monotonic()
    await follower.start()
    try:
        await eventually(lambda: follower.stuck, what="the follower stuck")
    finally:
        await follower.stop()
    assert follower.restarts >= follow.STUCK_AFTER
    assert "the store rejects everything" in (follower.last_error or "")
    assert follower.last_progress < started + 0.5


async def test_publishing_on_a_closed_connection_is_bus_unavailable_at_once(bus: Bus):
    """Before: ConnectionClosedError was retried for the whole 30 s publish deadline."""
    await bus.nc.close()
    started = time.monotonic()
    with pytest.raises(BusUnavailable):
        await bus.publish(subjects.run_event("run_closed", "heartbeat"), RunHeartbeat(seq=1))
    assert time.monotonic() - started < 1
