"""RunMetrics.observe: the event-to-metric mapping, fed decoded events without sockets."""

from __future__ import annotations

from typing import Any

from nexus_events.contract import codec, subjects
from nexus_events.contract.codec import JsMeta
from nexus_events.events.runs import (
    Condensation,
    RunCondensed,
    RunFailed,
    RunResumed,
    RunResuming,
)
from nexus_events.runtime.metrics import setup_metrics
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from nexus_core.run_metrics import INSTRUMENTS, RunMetrics, RunMetricsSettings

from ..metrics_support import failed_run, hist_count, lifecycle, points, value

SECOND = 1_000_000_000


def _feed(metrics: RunMetrics, run_id: str, events: list[tuple[str, Any]], t0: int) -> None:
    for i, (name, event) in enumerate(events):
        subject = subjects.run_event(run_id, name)
        enc = codec.encode(subject, event, source="test")
        meta = JsMeta(stream="NEXUS_RUNS", stream_seq=i + 1, timestamp_ns=t0 + i * SECOND)
        metrics.observe(codec.decode(subject, enc.body, enc.headers, meta))


def _metrics() -> tuple[RunMetrics, InMemoryMetricReader]:
    reader = InMemoryMetricReader()
    # No bus is needed to observe; the consumer and the poller are not started.
    return RunMetrics(None, MeterProvider(metric_readers=[reader])), reader  # type: ignore[arg-type]


def test_a_run_is_counted_by_state_reason_and_agent() -> None:
    metrics, reader = _metrics()
    _feed(metrics, "run_a", lifecycle(), 0)
    _feed(metrics, "run_b", failed_run(), 0)
    pts = points(reader)
    for state in ("requested", "prepared", "dispatched", "started"):
        assert value(pts, "nexus.runs", state=state, agent_id="implementer") == 1
    assert value(pts, "nexus.runs", state="completed", reason="succeeded") == 1
    assert (
        value(pts, "nexus.runs", state="failed", reason="unknown_agent", agent_id="reviewer") == 1
    )
    assert value(pts, "nexus.runs", state="turn") == 0  # turns have their own counter


def test_durations_come_from_jetstream_timestamps() -> None:
    metrics, reader = _metrics()
    _feed(metrics, "run_a", lifecycle(), 0)  # one event per second
    pts = points(reader)
    [queue] = pts["nexus.run.queue_wait"]
    assert queue.sum == 2.0  # requested (t=0) -> dispatched (t=2)
    [start] = pts["nexus.run.start_latency"]
    assert start.sum == 1.0
    [duration] = pts["nexus.run.duration"]
    assert duration.sum == 12.0  # requested -> completed, the 13th event
    assert dict(duration.attributes) == {
        "agent_id": "implementer",
        "state": "completed",
        "reason": "succeeded",
    }


def test_tokens_cost_and_tools() -> None:
    metrics, reader = _metrics()
    _feed(metrics, "run_a", lifecycle(), 0)
    pts = points(reader)
    model = {"agent_id": "implementer", "model": "gpt-4o-mini"}
    assert value(pts, "nexus.llm.tokens", direction="input", **model) == 150
    assert value(pts, "nexus.llm.tokens", direction="output", **model) == 30
    assert value(pts, "nexus.llm.cost_usd", **model) == 0.75
    assert value(pts, "nexus.llm.turns", **model) == 2
    assert value(pts, "nexus.tool.calls", tool="read_file", outcome="ok") == 1
    assert value(pts, "nexus.tool.calls", tool="run_shell", outcome="error") == 1
    assert value(pts, "nexus.tool.calls", tool="run_shell", outcome="refused") == 1
    assert hist_count(pts, "nexus.tool.duration", tool="read_file") == 1


def test_requests_for_a_new_run_id_are_not_counted_twice() -> None:
    metrics, reader = _metrics()
    _feed(metrics, subjects.NEW_RUN_TOKEN, failed_run()[:1], 0)
    assert value(points(reader), "nexus.runs", state="requested") == 0


def test_a_redelivered_terminal_event_does_not_restart_the_clock() -> None:
    metrics, _reader = _metrics()
    _feed(metrics, "run_a", lifecycle(), 0)
    assert "run_a" not in metrics._runs  # forgotten at the terminal event: memory stays bounded


def test_resumes_by_reason_resume_latency_and_condensations_by_strategy() -> None:
    metrics, reader = _metrics()
    condensed = {
        "turn": 3,
        "tokens_before": 9000,
        "tokens_after": 3000,
        "budget": 8000,
        "counter": "estimate",
    }
    events: list[tuple[str, Any]] = [
        *lifecycle()[:4],
        ("resuming", RunResuming(attempt=2, reason="heartbeat_missing")),
        ("resumed", RunResumed(attempt=2, turns=1, messages=3, entries=3, latency_ms=4500)),
        ("condensed", RunCondensed(**condensed, condensation=Condensation(strategy="elide"))),
        ("condensed", RunCondensed(**condensed, condensation=Condensation(strategy="summarise"))),
        ("condensed", RunCondensed(**condensed, condensation=Condensation(strategy="elide"))),
        ("resuming", RunResuming(attempt=3, reason="runtime_gone")),
        ("resumed", RunResumed(attempt=3, turns=1, messages=3, entries=3)),  # no latency known
        # A wake from a sleep is neither a resume after a loss nor a recovery time.
        ("resuming", RunResuming(attempt=4, reason="woke")),
        ("resumed", RunResumed(attempt=4, turns=1, messages=3, entries=3, latency_ms=600_000)),
        ("failed", RunFailed(reason="resume_failed", message="checkpoint digest mismatch")),
    ]
    _feed(metrics, "run_r", events, 0)
    pts = points(reader)
    agent = "implementer"
    assert value(pts, "nexus.run.resumes", agent_id=agent, reason="heartbeat_missing") == 1
    assert value(pts, "nexus.run.resumes", reason="runtime_gone") == 1
    assert value(pts, "nexus.run.resumes", reason="woke") == 0
    [latency] = pts["nexus.run.resume_latency"]
    assert (latency.count, latency.sum) == (1, 4.5)
    assert value(pts, "nexus.run.condensations", agent_id=agent, strategy="elide") == 2
    assert value(pts, "nexus.run.condensations", strategy="summarise") == 1
    assert value(pts, "nexus.runs", state="failed", reason="resume_failed") == 1
    # Not lifecycle steps of their own in `nexus.runs`.
    for state in ("resuming", "resumed", "condensed"):
        assert value(pts, "nexus.runs", state=state) == 0


def test_setup_without_exporters_records_only_into_given_readers() -> None:
    reader = InMemoryMetricReader()
    provider = setup_metrics("core", RunMetricsSettings(), readers=[reader], env={})
    RunMetrics(None, provider)  # type: ignore[arg-type]
    assert provider is not None
    assert len(INSTRUMENTS) == len(set(INSTRUMENTS))
