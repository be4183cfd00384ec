"""Handler throughput: durable handlers on FastStream (`nexus_events.transport.fast`) vs the bus
`Consumer` vs raw nats-py fetch+ack, on the same stream in the same run.

Every reader gets the same N heartbeats (published once by `Bus.publish_many`) through a
fresh durable of its own, with a handler that only counts. Rows:

- raw nats-py pull fetch(500) + ack: the floor (no decoding);
- the bus `Consumer` (batch 500): decode, batch handler, ack each;
- FastStream bare: a `PullSub(500)` subscriber with FastStream's own parser and JSON decoder
  to a dict, no Nexus envelope or event model (what FastStream itself costs);
- `nexus_events.transport.fast` (batch 500): FastStream + envelope decode + settlement middleware +
  consumer span per message;
- `nexus_events.transport.fast` ordered (fetch of one, as plane-sync's webhook ingress), on fewer
  messages.

Rounds alternate the readers and keep each one's best, so a noisy neighbour on the 2 cores
does not decide the ratios.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import nats
from faststream.nats import JStream, NatsBroker, PullSub
from nats.js.api import ConsumerConfig
from nexus_events.contract import subjects
from nexus_events.contract.streams import RUNS, ensure_streams
from nexus_events.events import RunHeartbeat
from nexus_events.events.base import Event
from nexus_events.transport.bus import Bus, BusSettings, ConsumerSpec, Delivery, Outgoing
from nexus_events.transport.fast import Handlers

from bench.baselines import raw_fetch_ack

N = 20_000
N_ORDERED = 1_000
BATCH = 500
ROUNDS = 3
Rows = list[tuple[str, float, str, float]]


def _spec(run_id: str, batch: int = BATCH) -> ConsumerSpec:
    return ConsumerSpec(
        stream=RUNS,
        durable=f"h_{uuid.uuid4().hex[:8]}",
        batch=batch,
        filter_subjects=(subjects.run_events_filter(run_id),),
        max_ack_pending=N,
    )


async def _timed(start: Callable[[], Awaitable[None]], done: asyncio.Event, n: int) -> float:
    t0 = time.perf_counter()
    await start()
    await asyncio.wait_for(done.wait(), timeout=120)
    return n / (time.perf_counter() - t0)


async def consumer_rate(bus: Bus, run_id: str) -> float:
    done, count = asyncio.Event(), 0

    async def handler(batch: list[Delivery]) -> None:
        nonlocal count
        count += len(batch)
        if count >= N:
            done.set()

    consumer = bus.consumer(_spec(run_id), handler)
    rate = await _timed(consumer.start, done, N)
    await consumer.stop()
    return rate


async def fast_rate(bus: Bus, run_id: str, *, ordered: bool = False) -> float:
    n = N_ORDERED if ordered else N
    done, count = asyncio.Event(), 0
    handlers = Handlers(bus)

    @handlers.durable(_spec(run_id), ordered=ordered)
    async def handle(event: Event) -> None:
        nonlocal count
        count += 1
        if count >= n:
            done.set()

    rate = await _timed(handlers.start, done, n)
    await handlers.stop()
    return rate


async def bare_faststream_rate(nats_url: str, run_id: str) -> float:
    done, count = asyncio.Event(), 0
    broker = NatsBroker(nats_url, logger=logging.getLogger("bench.faststream"), log_level=10)
    spec = _spec(run_id)

    @broker.subscriber(
        spec.filter_subjects[0],
        stream=JStream(RUNS, declare=False),
        durable=spec.durable,
        config=ConsumerConfig(max_ack_pending=N),
        pull_sub=PullSub(batch_size=BATCH, timeout=1.0),
    )
    async def handle(body: dict[str, Any]) -> None:
        nonlocal count
        count += 1
        if count >= N:
            done.set()

    rate = await _timed(broker.start, done, N)
    await broker.stop()
    return rate


async def run(nats_url: str) -> Rows:
    bus = await Bus.connect(BusSettings(url=nats_url), source="bench")
    await ensure_streams(bus.js)
    run_id = f"handlers{uuid.uuid4().hex[:6]}"
    subject = subjects.run_event(run_id, "heartbeat")
    await bus.publish_many(
        [Outgoing(subject, RunHeartbeat(seq=i, turn=i % 40, phase="tool")) for i in range(N)]
    )
    nc = await nats.connect(nats_url)
    raw = cons = bare = fast = ordered = 0.0
    filter_subject = subjects.run_events_filter(run_id)
    for _ in range(ROUNDS):
        raw = max(raw, await raw_fetch_ack(nc, filter_subject, N))
        cons = max(cons, await consumer_rate(bus, run_id))
        bare = max(bare, await bare_faststream_rate(nats_url, run_id))
        fast = max(fast, await fast_rate(bus, run_id))
        ordered = max(ordered, await fast_rate(bus, run_id, ordered=True))
    await nc.close()
    await bus.close()
    return [
        ("raw nats-py fetch+ack (msg/s)", raw, "", 1.0),
        ("bus Consumer decode+ack (msg/s)", cons, "raw fetch+ack", cons / raw),
        ("FastStream bare PullSub, JSON dict body (msg/s)", bare, "raw fetch+ack", bare / raw),
        ("nexus_events.transport.fast handler (msg/s)", fast, "raw fetch+ack", fast / raw),
        ("nexus_events.transport.fast vs bus Consumer", fast, "Consumer", fast / cons),
        (
            "nexus_events.transport.fast ordered, fetch of 1 (msg/s)",
            ordered,
            "raw fetch+ack",
            ordered / raw,
        ),
    ]
