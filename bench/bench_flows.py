"""Flows: step hand-off latency and concurrent three-step flows through a running FlowsApp.

The flows app runs in-process (as services/flows/tests/integration/harness.py runs it) on the
run's nats-server and PostgreSQL, with its default settings. Beside it, on a connection of
their own: a catalog responder answering ``nexus.core.v1.catalog.flows.get`` with a
three-step flow (a -> b -> c, each a `run` step), and a stub runner that answers each run
`requested` with `completed` at once (publishes pipelined, as core + scheduler + runner would
answer, minus their work).

(a) hand-off latency: 200 flows one at a time; for each of their 400 hand-offs, the time from
the stub publishing step a's (b's) run `completed` to step b's (c's) run `requested` arriving
at the stub, p50 and p99. A hand-off crosses three stream hops (NEXUS_RUNS `completed` ->
runs bridge -> `step_finished`; NEXUS_FLOWS -> projection -> engine -> `step_started`;
NEXUS_FLOWS -> projection -> engine -> run `requested`), so its floor is about three raw
round trips. Baseline, same run: raw nats-py JetStream publish -> durable pull consumer, one
message at a time.
(b) 1,000 concurrent flows: all `requested` in one pipelined burst; flows/s until the last
flow `completed`, and p99 flow duration (the burst's start -> that flow's `completed`).
Baseline, same run: a raw nats-py relay with the same shape: 1,000 chains of as many
messages as a flow stores (counted on NEXUS_FLOWS + NEXUS_RUNS after (b)), each message
published only once the one before it was consumed (a durable pull consumer, fetch(500),
pipelined publishes), so the same number of dependent publish -> consume hops with no work
between them. Also printed: how busy each loop of the service was during (b) (time spent in
the projection's batches, the engine's passes, the runs bridge, summed), to show which
one bounds the throughput.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import itertools
import json
import statistics
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import asyncpg
import nats
import nats.errors
from nats.aio.msg import Msg
from nats.js.api import AckPolicy, ConsumerConfig, StreamConfig
from nexus_events.contract import subjects
from nexus_events.contract.streams import FLOWS, RUNS, ensure_streams
from nexus_events.events import RunCompleted, RunResult
from nexus_events.events.flows import FlowDefinition, FlowRequested, step_run_id
from nexus_events.events.queries import FlowDefinitionView
from nexus_events.transport.bus import Bus, BusSettings, Outgoing
from nexus_flows.accepting import Acceptance
from nexus_flows.app import FlowsApp
from nexus_flows.bridges import Bridges
from nexus_flows.config import FlowsSettings
from nexus_flows.engine import Engine, FlowsRunner

Row = tuple[str, float, str, float]

SEQUENTIAL = 200  # flows one at a time: 2 hand-offs each
CONCURRENT = 1_000
STEPS = ("a", "b", "c")
WAIT = 30.0  # seconds one sequential flow may take
BURST_WAIT = 120.0  # seconds the burst is waited for
FLOW_ID = "bench3"
DEFINITION = FlowDefinition.model_validate(
    {
        "id": FLOW_ID,
        "steps": [{"id": s, "kind": "run", "agent": "stub", "input": "{{ input }}"} for s in STEPS],
    }
)


def _percentiles(samples: list[float]) -> tuple[float, float]:
    q = statistics.quantiles(samples, n=100, method="inclusive")
    return q[49], q[98]


class _Stub:
    """Catalog responder and stub runner. Records when each run was requested and when its
    `completed` was handed to the publisher, and when each flow ended."""

    def __init__(self, bus: Bus) -> None:
        self.bus = bus
        self.requested_at: dict[str, float] = {}
        self.completed_at: dict[str, float] = {}
        self.ended: dict[str, tuple[str, float]] = {}
        # (flow run, step, "step_finished" | "step_started") -> arrival
        self.seen: dict[tuple[str, str, str], float] = {}
        self.waiters: dict[str, asyncio.Future[str]] = {}
        self.pending: set[str] = set()  # flow runs of the burst not ended yet
        self.all_ended = asyncio.Event()
        self._queue: list[str] = []
        self._more = asyncio.Event()
        self._subs: list[Any] = []
        self._pump: asyncio.Task[None] | None = None
        self._catalog = FlowDefinitionView(revision=1, definition=DEFINITION).model_dump_json()

    async def start(self) -> None:
        nc = self.bus.nc
        for subject, cb in (
            (subjects.CORE_CATALOG_FLOWS_GET, self._on_catalog),
            (subjects.run_events_filter(None, "requested"), self._on_requested),
            (subjects.flow_events_filter(None, "completed"), self._on_ended),
            (subjects.flow_events_filter(None, "failed"), self._on_ended),
            (subjects.flow_events_filter(None, "step_finished"), self._on_step),
            (subjects.flow_events_filter(None, "step_started"), self._on_step),
        ):
            self._subs.append(await nc.subscribe(subject, cb=cb))
        self._pump = asyncio.create_task(self._publish())

    async def stop(self) -> None:
        for sub in self._subs:
            await sub.unsubscribe()
        if self._pump is not None:
            self._pump.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._pump

    def expect(self, flow_run_id: str) -> asyncio.Future[str]:
        fut: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        self.waiters[flow_run_id] = fut
        return fut

    async def _on_catalog(self, msg: Msg) -> None:
        query = json.loads(msg.data or b"{}")
        if query.get("id") == FLOW_ID:
            await msg.respond(self._catalog.encode())
        else:
            body = {"error": {"code": 404, "message": "no such flow", "fields": []}}
            await msg.respond(json.dumps(body).encode())

    async def _on_requested(self, msg: Msg) -> None:
        run_id = msg.subject.split(".")[4]
        if run_id in self.requested_at:
            return  # a re-request of the same run: core claims it once
        self.requested_at[run_id] = time.perf_counter()
        self._queue.append(run_id)
        self._more.set()

    async def _on_step(self, msg: Msg) -> None:
        now = time.perf_counter()
        _, _, _, fid, event = msg.subject.split(".")
        self.seen.setdefault((fid, json.loads(msg.data)["step"], event), now)

    async def _on_ended(self, msg: Msg) -> None:
        now = time.perf_counter()
        _, _, _, fid, event = msg.subject.split(".")
        self.ended.setdefault(fid, (event, now))
        if fid in self.pending:
            self.pending.discard(fid)
            if not self.pending:
                self.all_ended.set()
        fut = self.waiters.pop(fid, None)
        if fut is not None and not fut.done():
            fut.set_result(event)

    async def _publish(self) -> None:
        # Answers go out pipelined in whatever groups arrived meanwhile, so the stub's own
        # publish round trips do not pace the flows.
        while True:
            await self._more.wait()
            self._more.clear()
            runs, self._queue = self._queue, []
            now = time.perf_counter()
            for run_id in runs:
                self.completed_at[run_id] = now
            await self.bus.publish_many(
                [
                    Outgoing(
                        subjects.run_event(r, "completed"),
                        RunCompleted(result=RunResult(summary="stub")),
                        msg_id=f"bench:{r}:completed",
                    )
                    for r in runs
                ]
            )

    def handoffs(self, flow_run_ids: list[str]) -> dict[str, list[float]]:
        """ms from a step's `completed` publish to the next step's run `requested` arrival
        ("all"), and its three legs: to the step's `step_finished` (the runs bridge), to the
        next `step_started` (projection + engine), to the run `requested` (projection +
        engine again)."""
        out: dict[str, list[float]] = {"all": [], "bridge": [], "decide": [], "request": []}
        for fid in flow_run_ids:
            for before, after in itertools.pairwise(STEPS):
                done = self.completed_at[step_run_id(fid, before, 1)]
                finished = self.seen[(fid, before, "step_finished")]
                started = self.seen[(fid, after, "step_started")]
                requested = self.requested_at[step_run_id(fid, after, 1)]
                out["all"].append((requested - done) * 1000)
                out["bridge"].append((finished - done) * 1000)
                out["decide"].append((started - finished) * 1000)
                out["request"].append((requested - started) * 1000)
        return out


class _Busy:
    """Wall time spent inside some coroutine methods, summed, and their call counts: the
    service's loops run concurrently, so each one's busy share of the burst says which one
    bounds it."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self.calls: dict[str, int] = {}

    @contextlib.contextmanager
    def watching(self, targets: dict[str, tuple[type, str]]) -> Iterator[None]:
        saved = []
        for label, (cls, name) in targets.items():
            original = getattr(cls, name)
            saved.append((cls, name, original))
            setattr(cls, name, self._wrap(label, original))
        try:
            yield
        finally:
            for cls, name, original in saved:
                setattr(cls, name, original)

    def reset(self) -> None:
        self.seconds.clear()
        self.calls.clear()

    def _wrap(self, label: str, fn: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
        @functools.wraps(fn)
        async def timed(*args: Any, **kwargs: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return await fn(*args, **kwargs)
            finally:
                self.seconds[label] = self.seconds.get(label, 0.0) + time.perf_counter() - t0
                self.calls[label] = self.calls.get(label, 0) + 1

        return timed


LEGS = (
    ("leg completed->step_finished", "bridge"),
    ("leg step_finished->next step_started", "decide"),
    ("leg step_started->run requested", "request"),
)

BUSY_TARGETS: dict[str, tuple[type, str]] = {
    "projection batches (fetch excluded)": (FlowsRunner, "handle"),
    "engine passes (all touched flow runs)": (Engine, "_step_all"),
    "  of which catalog gets": (Acceptance, "_accept"),
    "runs bridge batches": (Bridges, "on_runs"),
    "  of which agent-schema gets (concurrent)": (Bridges, "_agent_schema"),
}


async def _raw_latency(nats_url: str, count: int) -> tuple[float, float]:
    """Raw nats-py: JetStream publish -> a waiting durable pull consumer, one at a time (ms)."""
    nc = await nats.connect(nats_url, name="bench-flows-raw-latency")
    js = nc.jetstream()
    stream = f"BENCH_FLOWLAT_{uuid.uuid4().hex[:6]}"
    prefix = f"bench.flowlat.{stream}"
    await js.add_stream(StreamConfig(name=stream, subjects=[f"{prefix}.>"]))
    sub = await js.pull_subscribe(
        f"{prefix}.>", durable="lat", stream=stream,
        config=ConsumerConfig(ack_policy=AckPolicy.EXPLICIT),
    )  # fmt: skip
    arrived: dict[str, asyncio.Future[float]] = {}
    stop = asyncio.Event()

    async def consume() -> None:
        while not stop.is_set():
            try:
                msgs = await sub.fetch(100, timeout=0.5)
            except (TimeoutError, nats.errors.TimeoutError):
                continue
            for m in msgs:
                fut = arrived.pop(m.subject, None)
                if fut is not None and not fut.done():
                    fut.set_result(time.perf_counter())
                await m.ack()

    task = asyncio.create_task(consume())
    samples = []
    try:
        for i in range(count):
            subject = f"{prefix}.{i}"
            fut: asyncio.Future[float] = asyncio.get_running_loop().create_future()
            arrived[subject] = fut
            t0 = time.perf_counter()
            await js.publish(subject, b'{"n": 1}')
            samples.append((await asyncio.wait_for(fut, 10) - t0) * 1000)
    finally:
        stop.set()
        await task
        await sub.unsubscribe()
        await js.delete_stream(stream)
        await nc.close()
    return _percentiles(samples)


async def _raw_relay(nats_url: str, chains: int, length: int) -> tuple[float, float]:
    """Raw nats-py relay: `chains` chains of `length` messages, each published once the one
    before it was consumed. Returns (chains/s, p99 chain duration in s)."""
    nc = await nats.connect(nats_url, name="bench-flows-raw-relay")
    js = nc.jetstream(publish_async_max_pending=2_000)
    stream = f"BENCH_FLOWRELAY_{uuid.uuid4().hex[:6]}"
    prefix = f"bench.flowrelay.{stream}"
    await js.add_stream(StreamConfig(name=stream, subjects=[f"{prefix}.>"]))
    sub = await js.pull_subscribe(
        f"{prefix}.>", durable="relay", stream=stream,
        config=ConsumerConfig(ack_policy=AckPolicy.EXPLICIT, max_ack_pending=20_000),
    )  # fmt: skip
    ended: dict[int, float] = {}
    done = asyncio.Event()
    body = b'{"n": 1}' * 40  # about the size of a flow event

    async def relay() -> None:
        while len(ended) < chains:
            try:
                msgs = await sub.fetch(500, timeout=0.5)
            except (TimeoutError, nats.errors.TimeoutError):
                continue
            for m in msgs:
                _, chain, hop = m.subject.rsplit(".", 2)
                await m.ack()
                if int(hop) + 1 < length:
                    await js.publish_async(f"{prefix}.{chain}.{int(hop) + 1}", body)
                else:
                    ended[int(chain)] = time.perf_counter()
        done.set()

    task = asyncio.create_task(relay())
    try:
        t0 = time.perf_counter()
        for i in range(chains):
            await js.publish_async(f"{prefix}.{i}.0", body)
        await asyncio.wait_for(done.wait(), BURST_WAIT)
        durations = sorted(t - t0 for t in ended.values())
        rate = chains / (durations[-1])
        p99 = _percentiles(durations)[1]
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await sub.unsubscribe()
        await js.delete_stream(stream)
        await nc.close()
    return rate, p99


async def _stored(bus: Bus) -> int:
    flows = (await bus.js.stream_info(FLOWS)).state.messages
    runs = (await bus.js.stream_info(RUNS)).state.messages
    return int(flows + runs)


async def _flows(nats_url: str, dsn: str, busy: _Busy) -> dict[str, Any]:
    tag = uuid.uuid4().hex[:6]
    bus = await Bus.connect(BusSettings(url=nats_url, name="bench-flows-stub"), source="bench")
    await ensure_streams(bus.js)
    # Earlier benchmarks leave runs behind; the runs bridge would read their terminal events.
    await bus.js.purge_stream(RUNS)
    await bus.js.purge_stream(FLOWS)
    stub = _Stub(bus)
    await stub.start()
    settings = FlowsSettings(database_url=dsn, health_port=None, consumer_prefix=f"bench{tag}")
    pool = await asyncpg.create_pool(dsn, min_size=1, max_size=settings.db_pool_size)
    assert pool is not None
    app = FlowsApp(settings, bus_settings=BusSettings(url=nats_url, name="bench-flows"), pool=pool)
    out: dict[str, Any] = {}
    try:
        await app.start()
        # (a) one flow at a time
        seq_ids = [f"seq-{tag}-{i}" for i in range(SEQUENTIAL)]
        durations = []
        for fid in seq_ids:
            waiter = stub.expect(fid)
            t0 = time.perf_counter()
            await bus.publish(
                subjects.flow_event(fid, "requested"), FlowRequested(flow=FLOW_ID, input="go")
            )
            event = await asyncio.wait_for(waiter, WAIT)
            assert event == "completed", f"flow {fid} {event}"
            durations.append((stub.ended[fid][1] - t0) * 1000)
        out["handoff"] = {k: _percentiles(v) for k, v in stub.handoffs(seq_ids).items()}
        out["sequential"] = _percentiles(durations)
        before = await _stored(bus)

        # (b) a burst of concurrent flows
        burst_ids = [f"burst-{tag}-{i}" for i in range(CONCURRENT)]
        requests = [
            Outgoing(subjects.flow_event(fid, "requested"), FlowRequested(flow=FLOW_ID, input="go"))
            for fid in burst_ids
        ]
        stub.pending = set(burst_ids)
        busy.reset()
        cpu0 = time.process_time()
        t0 = time.perf_counter()
        await bus.publish_many(requests)
        # Measured, not asserted: on a machine too loaded to finish in time the figures
        # cover the flows that did, and say how many.
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stub.all_ended.wait(), BURST_WAIT)
        ends = [stub.ended[fid] for fid in burst_ids if fid in stub.ended]
        out["done"] = sum(1 for e, _ in ends if e == "completed")
        took = [t - t0 for e, t in ends if e == "completed"]
        if len(took) < 2:  # percentiles need two samples
            took = [BURST_WAIT, BURST_WAIT]
        finished = [f for f in burst_ids if stub.ended.get(f, ("", 0.0))[0] == "completed"]
        out["cpu"] = time.process_time() - cpu0
        out["wall"] = max(took)
        out["rate"] = out["done"] / max(took)
        out["p99"] = _percentiles(took)[1]
        out["p50"] = _percentiles(took)[0]
        out["busy"] = (dict(busy.seconds), dict(busy.calls))
        # Let stray re-publishes land before counting what one flow stores.
        await asyncio.sleep(0.5)
        out["per_flow"] = (await _stored(bus) - before) / CONCURRENT
        out["handoff_burst"] = _percentiles(stub.handoffs(finished)["all"])
    finally:
        await app.stop()
        await stub.stop()
        await pool.close()
        await bus.close()
    return out


async def run(nats_url: str, dsn: str) -> list[Row]:
    raw_p50, raw_p99 = await _raw_latency(nats_url, 2 * SEQUENTIAL)
    busy = _Busy()
    with busy.watching(BUSY_TARGETS):
        f = await _flows(nats_url, dsn, busy)
    per_flow = round(f["per_flow"])
    relay_rate, relay_p99 = await _raw_relay(nats_url, CONCURRENT, per_flow)
    h50, h99 = f["handoff"]["all"]
    s50, s99 = f["sequential"]
    b50, b99 = f["handoff_burst"]
    wall = f["wall"]
    seconds, calls = f["busy"]
    rows: list[Row] = [
        ("raw JetStream publish->pull consume p50 (ms)", raw_p50, "", 1.0),
        ("raw JetStream publish->pull consume p99 (ms)", raw_p99, "", 1.0),
        ("hand-off completed->next requested p50 (ms)", h50, "raw p50", h50 / raw_p50),
        ("hand-off completed->next requested p99 (ms)", h99, "raw p99", h99 / raw_p99),
        *(
            row
            for leg, key in LEGS
            for row in (
                (f"  {leg} p50 (ms)", f["handoff"][key][0], "raw p50",
                 f["handoff"][key][0] / raw_p50),
                (f"  {leg} p99 (ms)", f["handoff"][key][1], "raw p99",
                 f["handoff"][key][1] / raw_p99),
            )
        ),
        ("one flow alone, requested->completed p50 (ms)", s50, "raw p50", s50 / raw_p50),
        ("one flow alone, requested->completed p99 (ms)", s99, "raw p99", s99 / raw_p99),
        ("events stored per 3-step flow (FLOWS+RUNS)", f["per_flow"], "", 1.0),
        (f"raw relay: {CONCURRENT:,} chains of {per_flow} hops (chains/s)", relay_rate, "", 1.0),
        ("raw relay: p99 chain duration (s)", relay_p99, "", 1.0),
        (f"concurrent flows completed of {CONCURRENT:,}", f["done"], "", 1.0),
        (f"{CONCURRENT:,} concurrent flows (flows/s)", f["rate"], "raw relay",
         f["rate"] / relay_rate),
        (f"{CONCURRENT:,} concurrent flows: p50 duration (s)", f["p50"], "", 1.0),
        (f"{CONCURRENT:,} concurrent flows: p99 duration (s)", f["p99"], "raw relay p99",
         f["p99"] / relay_p99),
        ("  hand-off during the burst p50 (ms)", b50, "raw p50", b50 / raw_p50),
        ("  hand-off during the burst p99 (ms)", b99, "raw p99", b99 / raw_p99),
    ]  # fmt: skip
    rows.append(
        ("CPU of this process (app + stub) in the burst (s)", f["cpu"], "burst wall",
         f["cpu"] / wall)
    )  # fmt: skip
    for label in BUSY_TARGETS:
        n = calls.get(label, 0)
        total = seconds.get(label, 0.0)
        rows.append(
            (f"busy: {label}, {n:,} calls (ms/call)", 1000 * total / max(n, 1), "burst wall",
             total / wall)
        )  # fmt: skip
    return rows
