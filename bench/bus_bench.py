"""Bus throughput: raw nats-py vs nexus_events, on one nats-server in one run."""

from __future__ import annotations

import asyncio
import json
import time
import uuid

import nats
import nats.errors
from nats.js import JetStreamContext
from nexus_events.contract import subjects
from nexus_events.contract.streams import RUNS, ensure_streams
from nexus_events.events import RunHeartbeat
from nexus_events.transport.bus import Bus, BusSettings, ConsumerSpec, Delivery, Outgoing

from bench.baselines import raw_fetch_ack

N = 20_000
WINDOW = 500


def _events(run_id: str) -> list[Outgoing]:
    subject = subjects.run_event(run_id, "heartbeat")
    return [Outgoing(subject, RunHeartbeat(seq=i, turn=i % 40, phase="tool")) for i in range(N)]


async def raw_publish(js: JetStreamContext, run_id: str) -> float:
    """A hand-written nats-py publisher sending the same wire messages: json.dumps of a dict,
    the envelope headers built inline, publish_async with WINDOW acks in flight."""
    subject = subjects.run_event(run_id, "heartbeat")
    bodies = [{"seq": i, "turn": i % 40, "phase": "tool"} for i in range(N)]
    t0 = time.perf_counter()
    for i, body in enumerate(bodies):
        headers = {
            "Nats-Msg-Id": f"{run_id}-{i:024d}",
            "Nexus-Schema": "nexus.agent.run.heartbeat/1",
            "Nexus-Source": "bench",
        }
        await js.publish_async(subject, json.dumps(body).encode(), headers=headers)
    await js.publish_async_completed()
    return N / (time.perf_counter() - t0)


async def nexus_publish(bus: Bus, run_id: str) -> float:
    items = _events(run_id)
    t0 = time.perf_counter()
    await bus.publish_many(items, window=WINDOW)
    return N / (time.perf_counter() - t0)


async def nexus_consume(bus: Bus, run_id: str) -> float:
    done = asyncio.Event()
    count = 0

    async def handler(batch: list[Delivery]) -> None:
        nonlocal count
        count += len(batch)
        if count >= N:
            done.set()

    spec = ConsumerSpec(
        stream=RUNS,
        durable=f"nx_{uuid.uuid4().hex[:8]}",
        batch=WINDOW,
        filter_subjects=(subjects.run_events_filter(run_id),),
        max_ack_pending=10_000,
    )
    consumer = bus.consumer(spec, handler)
    t0 = time.perf_counter()
    await consumer.start()
    await asyncio.wait_for(done.wait(), timeout=120)
    rate = N / (time.perf_counter() - t0)
    await consumer.stop()
    return rate


ROUNDS = 3


async def run(nats_url: str) -> list[tuple[str, float, str, float]]:
    """Alternate raw and nexus for ROUNDS rounds and keep each side's best round, so a
    noisy neighbour on the 2 cores does not decide the ratio."""
    nc = await nats.connect(nats_url)
    bus = await Bus.connect(BusSettings(url=nats_url), source="bench")
    await ensure_streams(bus.js)
    js = nc.jetstream(publish_async_max_pending=WINDOW)
    raw_pub = nx_pub = raw_con = nx_con = 0.0
    for r in range(ROUNDS):
        raw_pub = max(raw_pub, await raw_publish(js, f"raw{r}"))
        nx_pub = max(nx_pub, await nexus_publish(bus, f"nexus{r}"))
        # Both consumers read the same messages (those nexus published): same bytes, headers.
        raw_con = max(raw_con, await raw_fetch_ack(nc, subjects.run_events_filter(f"nexus{r}"), N))
        nx_con = max(nx_con, await nexus_consume(bus, f"nexus{r}"))
    await nc.close()
    await bus.close()
    return [
        ("raw nats-py publish_async (msg/s)", raw_pub, "", 1.0),
        ("nexus publish_many (msg/s)", nx_pub, "raw publish", nx_pub / raw_pub),
        ("raw nats-py fetch+ack (msg/s)", raw_con, "", 1.0),
        ("nexus consumer decode+ack (msg/s)", nx_con, "raw fetch+ack", nx_con / raw_con),
    ]
