"""Core: replay of run events into agent_runs + board, and run assembly latency.

(a) 200,000 run events (20,000 runs: requested, prepared, dispatched, started, turn,
tool_called, tool_result, tool_called, tool_result, completed) published first, untimed; then
timed: the agent_runs and board projections (the foundation's ProjectionRunner, as core runs
them) from an empty database to the end of the stream, against raw nats-py pull fetch+ack of
the same stream in the same run.
(b) requested -> prepared latency of 1,000 sequential requests through a running CoreApp with
memory lookups disabled, against raw JetStream publish -> pull consumer latency.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import statistics
import time
import uuid
from collections.abc import Iterator
from typing import Any

import asyncpg
import nats
import nats.errors
from nats.js.api import AckPolicy, ConsumerConfig, StreamConfig
from nexus_core.app import CoreApp
from nexus_core.board_projection import BoardProjection
from nexus_core.config import CoreSettings
from nexus_core.runs_projection import AgentRunsProjection
from nexus_events.contract import subjects
from nexus_events.contract.streams import CATALOG, RUNS, ensure_streams
from nexus_events.events import (
    Event,
    ModelSpec,
    RunCompleted,
    RunConfig,
    RunDispatched,
    RunPrepared,
    RunRequested,
    RunResult,
    RunStarted,
    RunTurn,
    ToolCalled,
    ToolResult,
)
from nexus_events.transport.bus import Bus, BusSettings, Outgoing
from nexus_events.transport.catalog_commands import apply_agent, apply_skill
from nexus_events.transport.projection import ProjectionRunner

from bench.baselines import raw_fetch_ack_at

RUN_COUNT = 20_000
EVENTS_PER_RUN = 10
N = RUN_COUNT * EVENTS_PER_RUN  # 200,000
# Runs are published in waves of this many, phase by phase, so a batch spans many runs.
WAVE = 500
REQUESTS = 1_000

AGENT = """
id: bench
role: implementer
model: {name: bench-model}
system_prompt: You implement tasks.
skills: [python]
tools: [read_file]
"""
SKILL = "---\nname: python\nversion: 1.0.0\n---\n# Python\nUse uv.\n"


def _run_events(i: int) -> list[Event]:
    run_id = f"run-{i}"
    task_id = f"T-{i % 5_000}"
    config = RunConfig(
        run_id=run_id,
        agent_id="bench",
        task_id=task_id,
        input="fix the bug",
        system_prompt="You implement tasks.",
        model=ModelSpec(name="bench-model"),
        catalog_revisions={"agent/bench": 1},
    )
    return [
        RunRequested(agent_id="bench", task_id=task_id, input="fix the bug"),
        RunPrepared(config=config),
        RunDispatched(runtime="local", handle=f"pid-{i}"),
        RunStarted(runner="bench"),
        RunTurn(turn=1, model="bench-model", tokens_in=1200, tokens_out=300, cost_usd=0.002),
        ToolCalled(turn=1, call_id="c1", tool="read_file", arguments={"path": "a.py"}),
        ToolResult(turn=1, call_id="c1", tool="read_file", ok=True, output="print(1)"),
        ToolCalled(turn=1, call_id="c2", tool="run_tests", arguments={}),
        ToolResult(turn=1, call_id="c2", tool="run_tests", ok=True, output="1 passed"),
        RunCompleted(result=RunResult(summary="fixed")),
    ]


def _waves() -> Iterator[list[Outgoing]]:
    """The workload a wave of runs at a time (not all at once: a 200k-event list kept alive
    would make every garbage collection of the measured code walk it)."""
    for start in range(0, RUN_COUNT, WAVE):
        runs = {i: _run_events(i) for i in range(start, min(start + WAVE, RUN_COUNT))}
        yield [
            Outgoing(subjects.run_event(f"run-{i}", events[phase].event_name), events[phase])
            for phase in range(EVENTS_PER_RUN)
            for i, events in runs.items()
        ]


async def _replay(bus: Bus, dsn: str, last: int) -> float:
    pool = await asyncpg.create_pool(dsn, min_size=2, max_size=6)
    assert pool is not None
    settings = CoreSettings()
    # As core runs them: one reader of NEXUS_RUNS feeding both projections.
    runner = ProjectionRunner(
        bus,
        pool,
        [AgentRunsProjection(), BoardProjection()],
        batch=settings.projection_batch,
        fetch_timeout=0.5,
    )
    t0 = time.perf_counter()
    async with runner:
        await runner.wait_until(RUNS, last, within=600)
        elapsed = time.perf_counter() - t0
    done = await pool.fetchval(
        "SELECT count(*) FROM core_agent_runs.agent_runs WHERE status = 'completed'"
    )
    assert done == RUN_COUNT, f"{done} of {RUN_COUNT} runs completed"
    tasks = await pool.fetchval("SELECT count(*) FROM core_board.tasks")
    assert tasks == 5_000, f"board has {tasks} tasks"
    await pool.close()
    return N / elapsed


def _percentiles(samples: list[float]) -> tuple[float, float]:
    q = statistics.quantiles(samples, n=100, method="inclusive")
    return q[49], q[98]


class _Arrivals:
    """Futures resolved with the arrival time (perf_counter) of the awaited key."""

    def __init__(self) -> None:
        self._waiting: dict[str, asyncio.Future[float]] = {}

    def expect(self, key: str) -> asyncio.Future[float]:
        fut: asyncio.Future[float] = asyncio.get_running_loop().create_future()
        self._waiting[key] = fut
        return fut

    def arrived(self, key: str) -> None:
        fut = self._waiting.pop(key, None)
        if fut is not None and not fut.done():
            fut.set_result(time.perf_counter())


async def _raw_latency(bus: Bus) -> tuple[float, float]:
    """JetStream publish -> a waiting pull consumer, one message at a time (ms)."""
    stream = f"BENCH_LAT_{uuid.uuid4().hex[:6]}"
    await bus.js.add_stream(StreamConfig(name=stream, subjects=[f"bench.lat.{stream}.>"]))
    sub = await bus.js.pull_subscribe(
        f"bench.lat.{stream}.>",
        durable="lat",
        stream=stream,
        config=ConsumerConfig(ack_policy=AckPolicy.EXPLICIT),
    )
    arrivals = _Arrivals()
    stop = asyncio.Event()

    async def consume() -> None:
        while not stop.is_set():
            try:
                msgs = await sub.fetch(100, timeout=0.5)
            except (TimeoutError, nats.errors.TimeoutError):
                continue
            for m in msgs:
                arrivals.arrived(m.subject)
                await m.ack()

    task = asyncio.create_task(consume())
    samples = []
    for i in range(REQUESTS):
        subject = f"bench.lat.{stream}.{i}"
        waiter = arrivals.expect(subject)
        t0 = time.perf_counter()
        await bus.js.publish(subject, b'{"n": 1}')
        samples.append((await asyncio.wait_for(waiter, 10) - t0) * 1000)
    stop.set()
    await task
    await sub.unsubscribe()
    await bus.js.delete_stream(stream)
    return _percentiles(samples)


async def _assembly_latency(bus: Bus, dsn: str) -> tuple[float, float]:
    """requested -> prepared through a running CoreApp, memory disabled (ms)."""
    await bus.js.purge_stream(RUNS)  # the replay's requests are not for this part
    pool = await asyncpg.create_pool(dsn, min_size=2, max_size=10)
    assert pool is not None
    settings = CoreSettings(
        database_url=dsn, memory_enabled=False, health_port=None, fetch_timeout=0.5
    )
    arrivals = _Arrivals()

    async def on_prepared(msg: Any) -> None:
        arrivals.arrived(subjects.parse_subject(msg.subject).run_id or "")

    sub = await bus.nc.subscribe(subjects.run_events_filter(None, "prepared"), cb=on_prepared)
    samples = []
    async with CoreApp(settings, bus=bus, pool=pool) as app:
        await apply_agent(bus, AGENT)
        await apply_skill(bus, SKILL)
        assert app.catalog_runner is not None
        catalog_last = (await bus.js.stream_info(CATALOG)).state.last_seq
        await app.catalog_runner.wait_until(CATALOG, catalog_last, within=30)
        body = json.dumps({"agent_id": "bench", "task_id": "T-1", "input": "go"}).encode()
        for i in range(REQUESTS):
            run_id = f"lat-{i}"
            waiter = arrivals.expect(run_id)
            t0 = time.perf_counter()
            await bus.js.publish(subjects.run_event(run_id, "requested"), body)
            samples.append((await asyncio.wait_for(waiter, 10) - t0) * 1000)
    await sub.unsubscribe()
    await pool.close()
    return _percentiles(samples)


async def run(nats_url: str, dsn: str) -> list[tuple[str, float, str, float]]:
    bus = await Bus.connect(BusSettings(url=nats_url), source="bench")
    try:
        await ensure_streams(bus.js)
        # Earlier benchmarks of the same run publish into NEXUS_RUNS too; the replay (and its
        # baseline) must read the 200k events of this one only.
        await bus.js.purge_stream(RUNS)
        last = 0
        for wave in _waves():
            acks = await bus.publish_many(wave)
            last = acks[-1].seq
        raw = await raw_fetch_ack_at(nats_url, subjects.run_events_filter(None), N)
        replay = await _replay(bus, dsn, last)
        raw_p50, raw_p99 = await _raw_latency(bus)
        p50, p99 = await _assembly_latency(bus, dsn)
    finally:
        with contextlib.suppress(Exception):
            await bus.close()
    return [
        ("raw fetch+ack of the 200k run events (ev/s)", raw, "", 1.0),
        ("replay into agent_runs + board (ev/s)", replay, "raw fetch+ack", replay / raw),
        ("raw JetStream publish->consume p50 (ms)", raw_p50, "", 1.0),
        ("raw JetStream publish->consume p99 (ms)", raw_p99, "", 1.0),
        ("assembly requested->prepared p50 (ms)", p50, "raw publish->consume p50", p50 / raw_p50),
        ("assembly requested->prepared p99 (ms)", p99, "raw publish->consume p99", p99 / raw_p99),
    ]
