"""JetStream cluster: the bus on three nats-server nodes, R3 streams against R1, same run.

Two three-node clusters on loopback side by side (`nexus_testing.NatsCluster`,
started here), one with every stream R1, one with every stream R3. Each figure is taken on
both in alternating rounds, each side's best round kept, so a neighbour loading the two
cores for a while does not decide the ratio (scaling one cluster's streams back and forth
instead would measure the scaling too):

- publish_many: 20,000 heartbeats pipelined (window 500), msg/s until the last ack
  (`bus_bench.nexus_publish`), beside raw nats-py publish_async of the same messages
  (`bus_bench.raw_publish`);
- consumer: a durable nexus `Consumer` decoding and acking them (`bus_bench.nexus_consume`);
- replay: `Bus.replay` of them (an ephemeral, ack-less pull consumer), msg/s;
- dispatch burst: 2,000 `prepared` in one burst through a SchedulerApp until the last
  `dispatched` (`bench_scheduler`'s measurement), runs/s, on R1 and on R3.

On R3 every write is stored by the leader and a follower before it is acknowledged
(quorum), so publishing pays a round trip between nodes; reading is served by the leader
alone.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from nexus_events.contract import subjects
from nexus_events.contract.streams import RUNS, STREAM_OF_FAMILY, StreamSettings, ensure_streams
from nexus_events.transport.bus import Bus, BusSettings
from nexus_testing import NatsCluster, eventually

from bench import bench_scheduler, bus_bench

ROUNDS = 3
BURST_ROUNDS = 2
Row = tuple[str, float, str, float]


@contextmanager
def _cluster() -> Iterator[NatsCluster]:
    base = Path(tempfile.mkdtemp(prefix="nxbench-cluster-"))
    cluster = NatsCluster(base, 3)
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()
        shutil.rmtree(base, ignore_errors=True)


@contextmanager
def _replicas_env(replicas: int) -> Iterator[None]:
    # bench_scheduler ensures the streams with the environment's settings: keep its replicas.
    before = os.environ.get("NEXUS_STREAMS_REPLICAS")
    os.environ["NEXUS_STREAMS_REPLICAS"] = str(replicas)
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("NEXUS_STREAMS_REPLICAS", None)
        else:
            os.environ["NEXUS_STREAMS_REPLICAS"] = before


async def _ensure(bus: Bus, replicas: int) -> None:
    """Every stream with `replicas`; wait until each replica of NEXUS_RUNS is current."""
    await ensure_streams(bus.js, StreamSettings(replicas=replicas))

    async def in_sync() -> bool:
        info = await bus.js.stream_info(RUNS)
        if replicas == 1:
            return True
        peers = info.cluster.replicas if info.cluster is not None else None
        return len(peers or []) == replicas - 1 and all(p.current for p in peers or [])

    await eventually(in_sync, within=60, interval=0.1, what=f"R{replicas} in sync")


async def _replay(bus: Bus, run_id: str) -> float:
    t0 = time.perf_counter()
    n = 0
    async for _ in bus.replay(RUNS, run_id=run_id):
        n += 1
    assert n == bus_bench.N, f"replayed {n} of {bus_bench.N}"
    return n / (time.perf_counter() - t0)


async def _bus_round(bus: Bus) -> tuple[float, float, float, float]:
    run_id = f"cl{uuid.uuid4().hex[:8]}"
    raw_js = bus.nc.jetstream(publish_async_max_pending=bus_bench.WINDOW)
    raw = await bus_bench.raw_publish(raw_js, f"raw{run_id}")
    await bus.js.purge_stream(RUNS, subject=subjects.run_events_filter(f"raw{run_id}"))
    publish = await bus_bench.nexus_publish(bus, run_id)
    consume = await bus_bench.nexus_consume(bus, run_id)
    replay = await _replay(bus, run_id)
    await bus.js.purge_stream(RUNS, subject=subjects.run_events_filter(run_id))
    # nexus_consume leaves its durable behind: none of them is the scheduler's business.
    for info in await bus.js.consumers_info(RUNS):
        await bus.js.delete_consumer(RUNS, info.name)
    return raw, publish, consume, replay


async def run() -> list[Row]:
    with _cluster() as r1_nodes, _cluster() as r3_nodes:
        clusters = {1: r1_nodes, 3: r3_nodes}
        buses = {
            r: await Bus.connect(BusSettings(url=c.urls, name=f"bench-r{r}"), source="bench")
            for r, c in clusters.items()
        }
        best: dict[int, list[float]] = {1: [0.0] * 4, 3: [0.0] * 4}
        bursts: dict[int, float] = {1: 0.0, 3: 0.0}
        try:
            for replicas, bus in buses.items():
                await _ensure(bus, replicas)
            for _ in range(ROUNDS):
                for replicas, bus in buses.items():
                    figures = zip(best[replicas], await _bus_round(bus), strict=True)
                    best[replicas] = [max(a, b) for a, b in figures]
            for _ in range(BURST_ROUNDS):
                for replicas, cluster in clusters.items():
                    with _replicas_env(replicas):
                        burst = (await bench_scheduler._scheduler(cluster.urls))[2]
                    bursts[replicas] = max(bursts[replicas], burst)
        finally:
            for bus in buses.values():
                await bus.close()
    (w1, p1, c1, r1), (w3, p3, c3, r3) = best[1], best[3]
    streams = len(set(STREAM_OF_FAMILY.values()))
    return [
        (f"3 nodes, R1 ({streams} streams): raw publish_async (msg/s)", w1, "", 1.0),
        ("3 nodes, R1: nexus publish_many (msg/s)", p1, "R1 raw publish", p1 / w1),
        ("3 nodes, R3: raw publish_async (msg/s)", w3, "R1 raw publish", w3 / w1),
        ("3 nodes, R3: nexus publish_many (msg/s)", p3, "R1 publish_many", p3 / p1),
        ("  the same, against R3 raw publish (msg/s)", p3, "R3 raw publish", p3 / w3),
        ("3 nodes, R1: consumer decode+ack (msg/s)", c1, "", 1.0),
        ("3 nodes, R3: consumer decode+ack (msg/s)", c3, "R1 consumer", c3 / c1),
        ("3 nodes, R1: replay (msg/s)", r1, "", 1.0),
        ("3 nodes, R3: replay (msg/s)", r3, "R1 replay", r3 / r1),
        ("3 nodes, R1: dispatch burst, 2,000 (runs/s)", bursts[1], "", 1.0),
        ("3 nodes, R3: dispatch burst, 2,000 (runs/s)", bursts[3], "R1 burst",
         bursts[3] / bursts[1]),
    ]  # fmt: skip


if __name__ == "__main__":
    for row in asyncio.run(run()):
        print(row)
