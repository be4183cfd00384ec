"""Raw nats-py baselines shared by the benchmarks: what hand-written client code achieves."""

from __future__ import annotations

import time
import uuid

import nats
import nats.errors
from nats.js.api import AckPolicy, ConsumerConfig
from nexus_events.contract.streams import RUNS

FETCH_BATCH = 500


async def raw_fetch_ack(
    nc: nats.NATS, filter_subject: str, count: int, stream: str = RUNS
) -> float:
    """Messages/s of a fresh durable pull consumer doing fetch(500) + ack of up to `count`
    messages matching `filter_subject`."""
    js = nc.jetstream()
    sub = await js.pull_subscribe(
        filter_subject,
        durable=f"raw_{uuid.uuid4().hex[:8]}",
        stream=stream,
        config=ConsumerConfig(ack_policy=AckPolicy.EXPLICIT, max_ack_pending=10_000),
    )
    got = 0
    t0 = time.perf_counter()
    while got < count:
        try:
            msgs = await sub.fetch(FETCH_BATCH, timeout=2)
        except (TimeoutError, nats.errors.TimeoutError):
            break
        for m in msgs:
            await m.ack()
        got += len(msgs)
    await nc.flush()
    rate = got / (time.perf_counter() - t0)
    await sub.unsubscribe()
    return rate


async def raw_fetch_ack_at(nats_url: str, filter_subject: str, count: int) -> float:
    """`raw_fetch_ack` on a connection of its own."""
    nc = await nats.connect(nats_url)
    try:
        return await raw_fetch_ack(nc, filter_subject, count)
    finally:
        await nc.close()
