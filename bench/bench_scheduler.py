"""Scheduler: `prepared` -> `dispatched` through a running SchedulerApp on the NoopRuntime.

(a) latency: 2,000 runs one at a time (publish `prepared`, wait for its `dispatched`), p50 and
p99, against raw nats-py JetStream publish -> durable pull consumer of the same number of
messages, one at a time, in the same run.
(b) throughput: 2,000 `prepared` published in one burst, runs/s until the last `dispatched`,
against raw nats-py: the same number of messages published pipelined and pulled+acked by a
durable consumer, msg/s from the first publish to the last message consumed.

The limits are high enough that nothing queues: this measures the dispatch path itself
(consumer fetch, admission fold + decide, runtime start, `dispatched` publish).

(c) takeover: NEXUS_RUNS holds 1,000,000 events (`BENCH_TAKEOVER_EVENTS`), almost all
heartbeats of finished runs (100 events a run: 96 beats) plus 50 open runs. A leader's
snapshot was written `BENCH_TAKEOVER_TAIL` events (10,000: a minute of a busy system) before
the end. Timed, each a new SchedulerApp from `start()` to leading (lease, rebuild,
re-adoption, consumers): with snapshots off (the two-pass rebuild over the whole history)
and on (snapshot + the tail), against raw nats-py reading the same stream once (an ack-less
pull consumer, fetch(500)), in the same run. Also timed: the first snapshot (the fold of the
whole history, as after a first start) and the next one (the fold of the tail since, as the
leader writes every interval).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import statistics
import time
import uuid
from dataclasses import dataclass

import nats
import nats.errors
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy, StreamConfig
from nexus_events.contract import subjects
from nexus_events.contract.streams import RUNS, ensure_streams
from nexus_events.events import (
    Event,
    ModelSpec,
    RunCompleted,
    RunConfig,
    RunDispatched,
    RunHeartbeat,
    RunPrepared,
    RunStarted,
)
from nexus_events.transport.bus import Bus, BusSettings, Outgoing
from nexus_scheduler.app import SchedulerApp
from nexus_scheduler.config import SchedulerSettings
from nexus_scheduler.rebuild import advance
from nexus_scheduler.runtime.base import RuntimeState, RuntimeStatus
from nexus_scheduler.snapshot import LifecycleFold
from nexus_scheduler.snapshot_store import SnapshotStore

from tests.support.noop_runtime import NoopRuntime

N = 2_000
WAIT = 30.0  # seconds one arrival (or the whole burst) may take before the bench fails
# The takeover history: events on NEXUS_RUNS, events per finished run, open runs.
HISTORY = int(os.environ.get("BENCH_TAKEOVER_EVENTS", "1000000"))
# Events stored after the snapshot the new leader starts from.
TAIL = int(os.environ.get("BENCH_TAKEOVER_TAIL", "10000"))
RUN_EVENTS = 100  # prepared, dispatched, started, 96 heartbeats, completed
OPEN_RUNS = 50
TAKEOVER_WAIT = 600.0


class _Arrivals:
    """Futures resolved with the arrival time (perf_counter) of the awaited key."""

    def __init__(self) -> None:
        self._waiting: dict[str, asyncio.Future[float]] = {}
        self.times: dict[str, float] = {}

    def expect(self, key: str) -> asyncio.Future[float]:
        fut: asyncio.Future[float] = asyncio.get_running_loop().create_future()
        self._waiting[key] = fut
        return fut

    def arrived(self, key: str) -> None:
        now = time.perf_counter()
        self.times.setdefault(key, now)
        fut = self._waiting.pop(key, None)
        if fut is not None and not fut.done():
            fut.set_result(now)


def _percentiles(samples: list[float]) -> tuple[float, float]:
    q = statistics.quantiles(samples, n=100, method="inclusive")
    return q[49], q[98]


def _config(run_id: str) -> RunConfig:
    return RunConfig(
        run_id=run_id, agent_id="bench", system_prompt="bench", model=ModelSpec(name="none")
    )


async def _raw(nats_url: str) -> tuple[float, float, float]:
    """Raw nats-py: publish -> durable pull consumer. Returns (p50 ms, p99 ms, msg/s)."""
    nc = await nats.connect(nats_url, name="bench-scheduler-raw")
    js = nc.jetstream()
    stream = f"BENCH_SCHED_{uuid.uuid4().hex[:6]}"
    prefix = f"bench.sched.{stream}"
    await js.add_stream(StreamConfig(name=stream, subjects=[f"{prefix}.>"]))
    sub = await js.pull_subscribe(
        f"{prefix}.>",
        durable="raw",
        stream=stream,
        config=ConsumerConfig(ack_policy=AckPolicy.EXPLICIT, max_ack_pending=10_000),
    )
    arrivals = _Arrivals()
    stop = asyncio.Event()

    async def consume() -> None:
        while not stop.is_set():
            try:
                msgs: list[Msg] = await sub.fetch(200, timeout=0.5)
            except (TimeoutError, nats.errors.TimeoutError):
                continue
            for m in msgs:
                arrivals.arrived(m.subject)
                await m.ack()

    task = asyncio.create_task(consume())
    try:
        samples = []
        for i in range(N):
            subject = f"{prefix}.lat.{i}"
            waiter = arrivals.expect(subject)
            t0 = time.perf_counter()
            await js.publish(subject, b'{"n": 1}')
            samples.append((await asyncio.wait_for(waiter, WAIT) - t0) * 1000)
        p50, p99 = _percentiles(samples)

        burst = [f"{prefix}.burst.{i}" for i in range(N)]
        last = arrivals.expect(burst[-1])
        pipelined: JetStreamContext = nc.jetstream(publish_async_max_pending=500)
        t0 = time.perf_counter()
        futures = [await pipelined.publish_async(s, b'{"n": 1}') for s in burst]
        await asyncio.wait_for(asyncio.gather(*futures), WAIT)
        await asyncio.wait_for(last, WAIT)
        missing = [s for s in burst if s not in arrivals.times]
        assert not missing, f"raw consumer missed {len(missing)} of {N}"
        rate = N / (max(arrivals.times[s] for s in burst) - t0)
    finally:
        stop.set()
        await task
        await sub.unsubscribe()
        await js.delete_stream(stream)
        await nc.close()
    return p50, p99, rate


async def _scheduler(nats_url: str) -> tuple[float, float, float]:
    """Through a SchedulerApp (NoopRuntime). Returns (p50 ms, p99 ms, runs/s)."""
    tag = uuid.uuid4().hex[:6]
    bus = await Bus.connect(BusSettings(url=nats_url, name="bench-scheduler"), source="bench")
    await ensure_streams(bus.js)
    # Other benchmarks leave runs on NEXUS_RUNS; they are not this scheduler's to dispatch.
    await bus.js.purge_stream(RUNS)
    settings = SchedulerSettings(
        replica_id=f"bench-{tag}",
        runtime="local",  # the NoopRuntime is passed to the app itself
        max_concurrent_runs=100 * N,
        tick_seconds=3600,  # no timers during the measurement
        lease_bucket=f"bench_scheduler_{tag}",
        # Its own snapshots: another run's would hand it that run's open runs to start.
        snapshot_bucket=f"bench_scheduler_snapshot_{tag}",
        consumer_name=f"bench-scheduler-{tag}",
        health_port=None,
    )
    runtime = NoopRuntime()
    app = SchedulerApp(settings, bus_settings=BusSettings(url=nats_url), runtime=runtime)
    arrivals = _Arrivals()

    async def on_dispatched(msg: Msg) -> None:
        arrivals.arrived(subjects.parse_subject(msg.subject).run_id or "")

    sub = await bus.nc.subscribe(subjects.run_events_filter(None, "dispatched"), cb=on_dispatched)
    await app.start()
    try:
        await asyncio.wait_for(app.leading.wait(), WAIT)
        samples = []
        for i in range(N):
            run_id = f"lat-{tag}-{i}"
            waiter = arrivals.expect(run_id)
            event = RunPrepared(config=_config(run_id))
            t0 = time.perf_counter()
            await bus.publish(subjects.run_event(run_id, "prepared"), event)
            samples.append((await asyncio.wait_for(waiter, WAIT) - t0) * 1000)
        p50, p99 = _percentiles(samples)

        burst = [f"burst-{tag}-{i}" for i in range(N)]
        items = [
            Outgoing(subjects.run_event(r, "prepared"), RunPrepared(config=_config(r)))
            for r in burst
        ]
        last = arrivals.expect(burst[-1])
        t0 = time.perf_counter()
        await bus.publish_many(items)
        await asyncio.wait_for(last, WAIT)
        missing = [r for r in burst if r not in arrivals.times]
        assert not missing, f"scheduler did not dispatch {len(missing)} of {N}"
        rate = N / (max(arrivals.times[r] for r in burst) - t0)
        assert len(runtime.started) == 2 * N, f"runtime started {len(runtime.started)}"
        assert app.service is not None
        assert app.service.stats.queued == 0, "runs were queued"
    finally:
        await sub.unsubscribe()
        await app.stop()
        for bucket in (settings.lease_bucket, settings.snapshot_bucket):
            with contextlib.suppress(Exception):
                await bus.js.delete_key_value(bucket)
        await bus.close()
    return p50, p99, rate


def _finished_run(run_id: str) -> list[Event]:
    beats: list[Event] = [RunHeartbeat(seq=i) for i in range(RUN_EVENTS - 4)]
    return [*_started(run_id), *beats, RunCompleted()]


def _started(run_id: str) -> list[Event]:
    return [
        RunPrepared(config=_config(run_id)),
        RunDispatched(runtime="noop", handle=run_id),
        RunStarted(runner="bench"),
    ]


def _outgoing(run_id: str, events: list[Event]) -> list[Outgoing]:
    return [Outgoing(subjects.run_event(run_id, e.event_name), e) for e in events]


async def _publish_runs(bus: Bus, tag: str, events: int, first: int = 0) -> int:
    """Publish finished runs (RUN_EVENTS each) of about `events` events; return how many."""
    wave: list[Outgoing] = []
    total = 0
    for i in range(first, first + max(1, events // RUN_EVENTS)):
        run_id = f"old-{tag}-{i}"
        wave += _outgoing(run_id, _finished_run(run_id))
        if len(wave) >= 20_000:
            total += len(await bus.publish_many(wave))
            wave = []
    if wave:
        total += len(await bus.publish_many(wave))
    return total


async def _publish_history(bus: Bus, tag: str) -> tuple[int, list[str]]:
    """Fill NEXUS_RUNS with the takeover history before the snapshot; return (messages, open
    run ids)."""
    open_runs = [f"open-{tag}-{i}" for i in range(OPEN_RUNS)]
    total = await _publish_runs(bus, tag, HISTORY - TAIL - OPEN_RUNS * 23)
    wave: list[Outgoing] = []
    for run_id in open_runs:
        wave += _outgoing(run_id, [*_started(run_id), *(RunHeartbeat(seq=i) for i in range(20))])
    total += len(await bus.publish_many(wave))
    return total, open_runs


async def _raw_replay(nats_url: str, total: int) -> float:
    """Seconds for plain nats-py to read all of NEXUS_RUNS once (ack-less, fetch(500))."""
    nc = await nats.connect(nats_url, name="bench-takeover-raw")
    js = nc.jetstream()
    name = f"raw_replay_{uuid.uuid4().hex[:8]}"
    await js.add_consumer(
        RUNS,
        ConsumerConfig(
            name=name,
            deliver_policy=DeliverPolicy.ALL,
            ack_policy=AckPolicy.NONE,
            inactive_threshold=60.0,
            mem_storage=True,
        ),
    )
    sub = await js.pull_subscribe_bind(name, stream=RUNS)
    got = 0
    t0 = time.perf_counter()
    try:
        while got < total:
            got += len(await sub.fetch(500, timeout=5))
        return time.perf_counter() - t0
    finally:
        await sub.unsubscribe()
        await nc.close()


async def _write_snapshot(bus: Bus, store: SnapshotStore, fold: LifecycleFold) -> tuple[float, int]:
    """What a leader's checkpointer does, timed: fold the lifecycle events since `fold`,
    store the snapshot. Returns (seconds, encoded bytes)."""
    t0 = time.perf_counter()
    info = await bus.js.stream_info(RUNS)
    await advance(bus, fold, info.state.last_seq)
    written = await store.write(fold.snapshot(info.created), lease_revision=1)
    took = time.perf_counter() - t0
    assert written.head is not None, written.reason
    return took, written.head.size


async def _timed_takeover(
    nats_url: str, bus: Bus, tag: str, open_runs: list[str], *, snapshots: bool, bucket: str
) -> tuple[float, int]:
    """Seconds from start() to leading, and the lifecycle events the rebuild folded."""
    name = f"{tag}-{'snap' if snapshots else 'nosnap'}"
    settings = SchedulerSettings(
        replica_id=f"bench-{name}",
        runtime="local",  # the NoopRuntime is passed to the app itself
        tick_seconds=3600,
        lease_bucket=f"bench_takeover_{name}",
        consumer_name=f"bench-takeover-{name}",
        snapshots=snapshots,
        snapshot_bucket=bucket,
        snapshot_min_events=10**9,  # the timed leader writes no snapshot of its own
        health_port=None,
    )
    runtime = NoopRuntime()  # the open runs still run: they are re-adopted
    runtime.states = {r: RuntimeStatus(RuntimeState.RUNNING) for r in open_runs}
    app = SchedulerApp(settings, bus_settings=BusSettings(url=nats_url), runtime=runtime)
    replayed: list[int] = []
    capture = _Capture(replayed)
    logging.getLogger("nexus_scheduler.app").addHandler(capture)
    t0 = time.perf_counter()
    await app.start()
    try:
        await asyncio.wait_for(app.leading.wait(), TAKEOVER_WAIT)
        took = time.perf_counter() - t0
        assert app.service is not None
        running = sum(1 for e in app.service.state.active() if e.run_id in runtime.states)
        assert running == OPEN_RUNS, f"rebuilt {running} of {OPEN_RUNS} open runs"
    finally:
        logging.getLogger("nexus_scheduler.app").removeHandler(capture)
        await app.stop()
        with contextlib.suppress(Exception):
            await bus.js.delete_key_value(settings.lease_bucket)
    return took, replayed[0] if replayed else -1


class _Capture(logging.Handler):
    """Keeps the `replayed` count of the "leading: state rebuilt" record."""

    def __init__(self, into: list[int]) -> None:
        super().__init__(logging.INFO)
        self.into = into

    def emit(self, record: logging.LogRecord) -> None:
        if record.getMessage() == "leading: state rebuilt":
            self.into.append(int(record.__dict__["replayed"]))


@dataclass(frozen=True)
class Takeover:
    events: int
    raw: float
    without: float
    without_replayed: int
    with_snapshot: float
    with_replayed: int
    first_write: float
    next_write: float
    snapshot_bytes: int


async def _takeover(nats_url: str) -> Takeover:
    tag = uuid.uuid4().hex[:6]
    bus = await Bus.connect(BusSettings(url=nats_url, name="bench-takeover"), source="bench")
    await bus.js.purge_stream(RUNS)
    bucket = f"bench_snapshot_{tag}"
    # Its INFO records carry the replayed counts: caught here, not printed.
    app_log = logging.getLogger("nexus_scheduler.app")
    level, propagate = app_log.level, app_log.propagate
    app_log.setLevel(logging.INFO)
    app_log.propagate = False
    try:
        total, open_runs = await _publish_history(bus, tag)
        store, fold = SnapshotStore(bus, bucket, "bench-writer"), LifecycleFold()
        first, _ = await _write_snapshot(bus, store, fold)
        total += await _publish_runs(bus, tag, TAIL, first=10**7)
        raw = await _raw_replay(nats_url, total)
        without, without_n = await _timed_takeover(
            nats_url, bus, tag, open_runs, snapshots=False, bucket=bucket
        )
        with_s, with_n = await _timed_takeover(
            nats_url, bus, tag, open_runs, snapshots=True, bucket=bucket
        )
        # The next snapshot, as the leader writes it every interval: the tail only.
        following, size = await _write_snapshot(bus, store, fold)
    finally:
        app_log.setLevel(level)
        app_log.propagate = propagate
        with contextlib.suppress(Exception):
            await bus.js.delete_key_value(bucket)
        await bus.js.purge_stream(RUNS)
        await bus.close()
    return Takeover(total, raw, without, without_n, with_s, with_n, first, following, size)


async def run(nats_url: str) -> list[tuple[str, float, str, float]]:
    raw_p50, raw_p99, raw_rate = await _raw(nats_url)
    p50, p99, rate = await _scheduler(nats_url)
    t = await _takeover(nats_url)
    size = f"{t.events:,}-event history"
    return [
        ("raw publish->pull consume p50 (ms)", raw_p50, "", 1.0),
        ("raw publish->pull consume p99 (ms)", raw_p99, "", 1.0),
        ("raw publish+pull consume burst (msg/s)", raw_rate, "", 1.0),
        ("prepared->dispatched p50 (ms)", p50, "raw publish->consume p50", p50 / raw_p50),
        ("prepared->dispatched p99 (ms)", p99, "raw publish->consume p99", p99 / raw_p99),
        ("dispatch throughput, 2,000 burst (runs/s)", rate, "raw burst", rate / raw_rate),
        (f"raw nats-py read of a {size} (s)", t.raw, "", 1.0),
        (f"takeover, no snapshot: {t.without_replayed:,} folded (s)", t.without, "raw read",
         t.without / t.raw),
        (f"takeover, snapshot+{TAIL:,} tail: {t.with_replayed:,} folded (s)", t.with_snapshot,
         "no snapshot", t.with_snapshot / t.without),
        ("  the same, against the raw read (s)", t.with_snapshot, "raw read",
         t.with_snapshot / t.raw),
        ("first snapshot: fold the history, write (s)", t.first_write, "raw read",
         t.first_write / t.raw),
        (f"next snapshot: fold the tail, write {t.snapshot_bytes:,} B (s)", t.next_write,
         "raw read", t.next_write / t.raw),
    ]  # fmt: skip
