"""PullReader against a real nats-server: order, batching, waiting, and a consumer that goes."""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest
from nats.js.api import AckPolicy, ConsumerConfig
from nexus_events.contract import subjects
from nexus_events.contract.codec import JsMeta
from nexus_events.contract.streams import RUNS
from nexus_events.errors import PullStalled
from nexus_events.events import RunHeartbeat
from nexus_events.transport.bus import Bus, Outgoing
from nexus_events.transport.pull import PullReader


async def consumer(bus: Bus, run_id: str) -> str:
    name = f"pull-{uuid.uuid4().hex[:10]}"
    await bus.js.add_consumer(
        RUNS,
        ConsumerConfig(
            name=name,
            durable_name=name,
            ack_policy=AckPolicy.NONE,
            filter_subject=subjects.run_events_filter(run_id),
        ),
    )
    return name


async def beats(bus: Bus, run_id: str, count: int, first: int = 1) -> None:
    subject = subjects.run_event(run_id, "heartbeat")
    await bus.publish_many(
        [Outgoing(subject, RunHeartbeat(seq=n)) for n in range(first, first + count)]
    )


def seqs(msgs) -> list[int]:
    out = []
    for m in msgs:
        meta = JsMeta.from_reply(m.reply)
        assert meta is not None
        out.append(meta.consumer_seq)
    return out


async def test_reads_everything_in_order_in_full_batches(bus: Bus):
    run_id = f"r{uuid.uuid4().hex[:8]}"
    await beats(bus, run_id, 1_050)
    name = await consumer(bus, run_id)
    got, sizes = [], []
    async with PullReader(bus.nc, RUNS, name) as reader:
        while len(got) < 1_050:
            batch = await reader.fetch(200, 2.0)
            assert batch, "a fetch came back empty while messages were pending"
            sizes.append(len(batch))
            got.extend(batch)
        assert await reader.fetch(200, 0.3) == []
    assert seqs(got) == list(range(1, 1_051))
    # Full batches while the server had plenty; only the last is short.
    assert sizes == [200] * 5 + [50]


async def test_waits_for_messages_published_later(bus: Bus):
    run_id = f"r{uuid.uuid4().hex[:8]}"
    name = await consumer(bus, run_id)
    async with PullReader(bus.nc, RUNS, name) as reader:
        started = time.monotonic()
        assert await reader.fetch(100, 0.3) == []
        assert time.monotonic() - started >= 0.25
        publisher = asyncio.create_task(_later(bus, run_id))
        started = time.monotonic()
        first = await reader.fetch(100, 5.0)
        # Handed out as soon as it arrived, not when the wait ran out.
        assert time.monotonic() - started < 2.0
        await publisher
        rest: list = []
        while len(first) + len(rest) < 3:
            more = await reader.fetch(100, 2.0)
            assert more
            rest.extend(more)
    assert seqs([*first, *rest]) == [1, 2, 3]


async def _later(bus: Bus, run_id: str) -> None:
    await asyncio.sleep(0.2)
    await beats(bus, run_id, 3)


async def test_short_batches_when_less_is_available(bus: Bus):
    run_id = f"r{uuid.uuid4().hex[:8]}"
    await beats(bus, run_id, 7)
    name = await consumer(bus, run_id)
    async with PullReader(bus.nc, RUNS, name) as reader:
        started = time.monotonic()
        batch = await reader.fetch(500, 5.0)
        # A no_wait request: what is there comes back at once, not after the wait.
        assert time.monotonic() - started < 1.0
        assert seqs(batch) == list(range(1, 8))


async def test_a_deleted_consumer_stalls_the_reader(bus: Bus):
    run_id = f"r{uuid.uuid4().hex[:8]}"
    name = await consumer(bus, run_id)
    async with PullReader(bus.nc, RUNS, name) as reader:
        waiting = asyncio.create_task(reader.fetch(100, 5.0))
        await asyncio.sleep(0.3)  # the first (no_wait) request is answered, a waiting one is open
        await bus.js.delete_consumer(RUNS, name)
        with pytest.raises(PullStalled, match="409"):
            await waiting


async def test_fetch_before_start_is_an_error(bus: Bus):
    reader = PullReader(bus.nc, RUNS, "nobody")
    with pytest.raises(Exception, match="before start"):
        await reader.fetch(1, 0.1)


async def test_an_unknown_consumer_is_reported_not_waited_for(bus: Bus):
    async with PullReader(bus.nc, RUNS, f"missing-{uuid.uuid4().hex[:6]}") as reader:
        started = time.monotonic()
        with pytest.raises(PullStalled):
            await reader.fetch(10, 10.0)
        assert time.monotonic() - started < 5.0
