"""RunMetrics against a real nats-server and PostgreSQL: the stream in, OTel metrics out."""

from __future__ import annotations

from typing import Any

from nats.js.api import AckPolicy, ConsumerConfig
from nexus_events.contract import subjects
from nexus_events.contract.streams import RUNS
from nexus_events.events import RunHeartbeat
from nexus_events.transport.bus import Bus, Outgoing
from nexus_events.transport.dead_letters import build_dead_letter
from nexus_events.transport.projection import CHECKPOINT_TABLE
from nexus_testing import eventually
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from nexus_core.run_metrics import RunMetrics, RunMetricsSettings

from ..metrics_support import failed_run, hist_count, lifecycle, points, value


async def _publish(bus: Bus, run_id: str, events: list[tuple[str, Any]]) -> None:
    await bus.publish_many(Outgoing(subjects.run_event(run_id, n), e) for n, e in events)


async def test_metrics_follow_the_runs_stream(bus: Bus) -> None:
    reader = InMemoryMetricReader()
    metrics = RunMetrics(
        bus, MeterProvider(metric_readers=[reader]), settings=RunMetricsSettings(poll_interval=0.1)
    )
    await _publish(bus, "run_1", lifecycle())
    async with metrics:
        await _publish(bus, "run_2", failed_run())

        def done() -> dict[str, list[Any]] | None:
            pts = points(reader)
            return pts if value(pts, "nexus.runs", state="failed") == 1 else None

        pts = await eventually(done, what="both runs counted")
        assert value(pts, "nexus.runs", state="completed", agent_id="implementer") == 1
        assert value(pts, "nexus.runs", state="failed", reason="unknown_agent") == 1
        assert hist_count(pts, "nexus.run.duration", state="completed") == 1
        assert hist_count(pts, "nexus.run.queue_wait", agent_id="implementer") == 1
        assert value(pts, "nexus.llm.tokens", model="gpt-4o-mini", direction="input") == 150
        assert value(pts, "nexus.tool.calls", outcome="refused") == 1
        # The poller saw the metrics' own durable consumer, caught up.
        pts = await eventually(
            lambda: (p := points(reader)) and p.get("nexus.consumer.pending") and p,
            what="consumer gauges",
        )
        assert value(pts, "nexus.consumer.pending", stream=RUNS, consumer="metrics") == 0
    # A restart resumes from the durable consumer: nothing is counted twice.
    reader2 = InMemoryMetricReader()
    async with RunMetrics(bus, MeterProvider(metric_readers=[reader2])):
        await _publish(bus, "run_3", failed_run())
        pts = await eventually(
            lambda: (p := points(reader2)) and value(p, "nexus.runs", state="failed") and p,
            what="the third run",
        )
        assert value(pts, "nexus.runs", state="failed") == 1
        assert value(pts, "nexus.runs", state="completed") == 0


async def test_pipeline_gauges(bus: Bus, pg_pool: Any) -> None:
    # A durable consumer that is behind: 3 pending, 1 delivered but not acked.
    for seq in range(4):
        await bus.publish(subjects.run_event("run_p", "heartbeat"), RunHeartbeat(seq=seq))
    await bus.js.add_consumer(
        RUNS, ConsumerConfig(durable_name="slow", ack_policy=AckPolicy.EXPLICIT)
    )
    sub = await bus.js.pull_subscribe_bind("slow", stream=RUNS)
    await sub.fetch(1, timeout=2)
    # Two dead letters of one service.
    for seq in (1, 2):
        await bus.file_dead_letter(
            build_dead_letter(
                service=bus.source,
                subject="nexus.agent.run.v1.x.requested",
                data=b"garbage",
                headers={},
                reason="undecodable",
                error="not json",
                consumer="core_assembly",
                stream=RUNS,
                stream_seq=seq,
                num_delivered=1,
            )
        )
    # A projection whose checkpoint is one event behind the stream's end.
    async with pg_pool.acquire() as conn:
        await conn.execute("CREATE SCHEMA proj_x")
        await conn.execute(
            f"CREATE TABLE proj_x.{CHECKPOINT_TABLE} "
            "(stream text PRIMARY KEY, consumer text, last_seq bigint)"
        )
        await conn.execute(f"INSERT INTO proj_x.{CHECKPOINT_TABLE} VALUES ('{RUNS}', 'p', 3)")

    reader = InMemoryMetricReader()
    metrics = RunMetrics(bus, MeterProvider(metric_readers=[reader]), pool=pg_pool)
    snap = await metrics.poll_once()
    assert snap.consumers[(RUNS, "slow")] == (3, 1)
    pts = points(reader)
    assert value(pts, "nexus.consumer.pending", stream=RUNS, consumer="slow") == 3
    assert value(pts, "nexus.consumer.ack_pending", stream=RUNS, consumer="slow") == 1
    assert value(pts, "nexus.dlq.messages", service="test") == 2
    assert value(pts, "nexus.projection.lag", projection="proj_x", stream=RUNS) == 1
    await sub.unsubscribe()
