"""Every metric a Grafana dashboard queries is one Nexus emits.

The Prometheus names are taken from the real Prometheus exporter's output for a RunMetrics
that saw a whole run and a pipeline poll, a MemoryMetrics that saw a search, writes and
an extraction, and every instrument the flows service's FlowMetrics creates, each given one
measurement; not from a hand-written mapping.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import pytest
import yaml
from nexus_core.run_metrics import INSTRUMENTS, PipelineSnapshot, RunMetrics
from nexus_events.contract import codec, subjects
from nexus_events.contract.codec import JsMeta
from nexus_events.events.runs import (
    Condensation,
    RunCompleted,
    RunCondensed,
    RunDispatched,
    RunFailed,
    RunRequested,
    RunResumed,
    RunResuming,
    RunStarted,
    RunTurn,
    ToolResult,
)
from nexus_memory.metrics import MemoryMetrics
from opentelemetry.exporter.prometheus import PrometheusMetricReader
from opentelemetry.metrics import CallbackOptions, Meter, Observation
from opentelemetry.sdk.metrics import MeterProvider
from prometheus_client import CollectorRegistry, generate_latest

ROOT = Path(__file__).resolve().parents[2]
DASHBOARDS = sorted((ROOT / "deploy/grafana/dashboards").glob("*.json"))
PROMQL_WORDS = {
    # aggregations, functions and keywords that can appear as bare identifiers
    "sum", "max", "min", "avg", "count", "by", "without", "rate", "increase", "delta",
    "histogram_quantile", "label_values", "and", "or", "unless", "on", "ignoring",
    "group_left", "group_right", "offset", "bool", "topk", "bottomk", "irate", "abs",
    "clamp_min", "clamp_max", "vector", "time", "sum_over_time", "avg_over_time",
    "max_over_time", "le",
}  # fmt: skip


def exported_names() -> set[str]:
    """Metric family and sample names the Prometheus exporter really produces."""
    registry = CollectorRegistry()
    reader = PrometheusMetricReader(registry=registry)
    provider = MeterProvider(metric_readers=[reader])
    metrics = RunMetrics(None, provider)  # type: ignore[arg-type]
    memory = MemoryMetrics(provider)
    memory.search(0.004, strict=True)
    memory.record("recorded")
    memory.record("blocked")
    memory.extraction("recorded")
    metrics.canary_decided("implementer", "promote")
    run_a = [
        ("requested", RunRequested(agent_id="implementer")),
        ("dispatched", RunDispatched(runtime="local", handle="1")),
        ("started", RunStarted()),
        ("turn", RunTurn(turn=1, model="m", tokens_in=3, tokens_out=2, cost_usd=0.1)),
        ("tool_result", ToolResult(turn=1, call_id="c", tool="t", ok=True, duration_ms=5)),
        ("resuming", RunResuming(attempt=2, reason="runtime_gone")),
        ("resumed", RunResumed(attempt=2, turns=1, messages=3, entries=3, latency_ms=900)),
        (
            "condensed",
            RunCondensed(
                turn=2,
                tokens_before=9,
                tokens_after=3,
                budget=8,
                counter="estimate",
                condensation=Condensation(strategy="elide"),
            ),
        ),
        ("completed", RunCompleted()),
    ]
    run_b = [("requested", RunRequested(agent_id="x")), ("failed", RunFailed(reason="stuck"))]
    for run_id, events in (("run_a", run_a), ("run_b", run_b)):
        for i, (name, event) in enumerate(events):
            subject = subjects.run_event(run_id, name)
            enc = codec.encode(subject, event, source="test")
            meta = JsMeta("NEXUS_RUNS", i + 1, timestamp_ns=(i + 1) * 10**9)
            metrics.observe(codec.decode(subject, enc.body, enc.headers, meta))
    metrics.snapshot = PipelineSnapshot(
        consumers={("NEXUS_RUNS", "core_assembly"): (1, 2)},
        dlq={"core": 3},
        projections={("core_agent_runs", "NEXUS_RUNS"): 4},
        followers={"agent_runs_board": (2, True)},
    )
    return _sample_names(generate_latest(registry).decode())


class _RecordingMeter:
    """A real Meter that remembers every instrument it creates, so that the test can give each
    one a measurement without knowing the API of the class that created it. Observable
    instruments get a callback of its own (the service's would observe its live state)."""

    def __init__(self, meter: Meter) -> None:
        self._meter = meter
        self.instruments: list[Any] = []

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._meter, name)
        if not name.startswith("create_"):
            return attr

        def create(*args: Any, **kwargs: Any) -> Any:
            if "observable" in name:
                args = args[:1]  # (name, callbacks, unit, description): callbacks replaced
                kwargs["callbacks"] = [_one]
            instrument = attr(*args, **kwargs)
            self.instruments.append(instrument)
            return instrument

        return create


def _one(_: CallbackOptions) -> Iterable[Observation]:
    return [Observation(1)]


class _RecordingProvider:
    """A MeterProvider whose meters are `_RecordingMeter`s over a real SDK provider's."""

    def __init__(self, provider: MeterProvider) -> None:
        self._provider = provider
        self.meters: list[_RecordingMeter] = []

    def get_meter(self, *args: Any, **kwargs: Any) -> _RecordingMeter:
        meter = _RecordingMeter(self._provider.get_meter(*args, **kwargs))
        self.meters.append(meter)
        return meter


def flows_exported_names() -> set[str]:
    """The Prometheus names of every instrument `nexus_flows.metrics.FlowMetrics(provider)`
    creates, each given one measurement (a counter 1, a histogram 0.5 s, a gauge 1)."""
    from nexus_flows.metrics import FlowMetrics

    return _exported_by(FlowMetrics)


def console_exported_names() -> set[str]:
    """The same for the console's `nexus_console.metrics.ConsoleMetrics(provider)`."""
    from nexus_console.metrics import ConsoleMetrics

    return _exported_by(ConsoleMetrics)


def lab_exported_names() -> set[str]:
    """The same for the lab's `nexus_lab.metrics.LabMetrics(provider)`."""
    from nexus_lab.metrics import LabMetrics

    return _exported_by(LabMetrics)


def spend_exported_names() -> set[str]:
    """The same for the spend service's `nexus_spend.metrics.SpendMetrics(provider)`."""
    from nexus_spend.metrics import SpendMetrics  # type: ignore[import-not-found,unused-ignore]

    return _exported_by(SpendMetrics)


def scheduler_exported_names() -> set[str]:
    """The same for the scheduler's `nexus_scheduler.metrics.SchedulerMetrics(provider)`."""
    from nexus_scheduler.metrics import SchedulerMetrics

    return _exported_by(SchedulerMetrics)


def _exported_by(metrics: Callable[[Any], object]) -> set[str]:
    registry = CollectorRegistry()
    provider = MeterProvider(metric_readers=[PrometheusMetricReader(registry=registry)])
    recording = _RecordingProvider(provider)
    metrics(recording)
    instruments = [i for m in recording.meters for i in m.instruments]
    assert instruments, f"{metrics} created no instrument"
    for instrument in instruments:
        measure: Callable[..., None] | None = next(
            (getattr(instrument, m) for m in ("add", "record", "set") if hasattr(instrument, m)),
            None,
        )
        if measure is not None:
            measure(0.5 if hasattr(instrument, "record") else 1)
    return _sample_names(generate_latest(registry).decode())


def _sample_names(text: str) -> set[str]:
    return {
        re.split(r"[{ ]", line, maxsplit=1)[0]
        for line in text.splitlines()
        if line and not line.startswith("#")
    }


def queried_metrics(expr: str) -> set[str]:
    """Metric names in a PromQL expression (label matchers, strings, `by (...)` removed)."""
    expr = re.sub(r"label_values\(\s*([^,)]+?)\s*,[^)]*\)", r"\1", expr)  # (metric, label)
    expr = re.sub(r'"(?:[^"\\]|\\.)*"', "", expr)
    expr = re.sub(r"\{[^}]*\}", "", expr)
    expr = re.sub(r"\[[^\]]*\]", "", expr)
    expr = re.sub(r"\b(by|without)\s*\([^)]*\)", "", expr)
    expr = expr.replace("$agent", "")
    tokens = set(re.findall(r"[A-Za-z_:][A-Za-z0-9_:]*", expr))
    return {t for t in tokens if t not in PROMQL_WORDS and not re.fullmatch(r"e\d*", t)}


def dashboard_queries(dashboard: dict[str, Any]) -> list[str]:
    exprs = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    for var in dashboard.get("templating", {}).get("list", []):
        query = var.get("query")
        exprs.append(query["query"] if isinstance(query, dict) else str(query or ""))
    return [e for e in exprs if e]


@pytest.fixture(scope="module")
def emitted() -> set[str]:
    return exported_names()


def test_the_exporter_emits_every_instrument(emitted: set[str]) -> None:
    # Each OTel instrument shows up under its Prometheus name (dots -> underscores, plus the
    # unit suffix and _total the exporter adds).
    for instrument in INSTRUMENTS:
        base = instrument.replace(".", "_")
        assert any(n.startswith(base) for n in emitted), f"{instrument} not exported"
    assert "nexus_runs_total" in emitted
    assert "nexus_run_duration_seconds_bucket" in emitted
    assert "nexus_llm_cost_usd_total" in emitted
    assert "nexus_consumer_pending" in emitted
    assert "nexus_memory_search_seconds_bucket" in emitted
    assert "nexus_memory_records_total" in emitted


def test_the_query_parser_finds_metric_names() -> None:
    expr = 'histogram_quantile(0.95, sum by (le, tool) (rate(x_bucket{a="b"}[5m]))) / y'
    assert queried_metrics(expr) == {"x_bucket", "y"}
    assert queried_metrics("label_values(nexus_runs_total, agent_id)") == {"nexus_runs_total"}


# The flows service's own metrics (nexus_flows.metrics), for the flows dashboard: the names it
# must export (docs/observability.md).
FLOWS_METRICS = {
    "nexus_flows_started_total",
    "nexus_flows_finished_total",
    "nexus_flow_steps_started_total",
    "nexus_flow_step_handoff_seconds_bucket",
    "nexus_flow_gates_waiting",
}


# The lab's metrics (nexus_lab.metrics) the pipeline dashboard's Lab row reads
# (docs/observability.md).
LAB_METRICS = {"nexus_lab_eval_runs_total", "nexus_lab_cases_graded_total"}


# The spend service's metrics (nexus_spend.metrics) the pipeline dashboard's Spend row reads
# (docs/spend.md, docs/observability.md).
SPEND_METRICS = {"nexus_spend_cost_usd_total", "nexus_spend_holds", "nexus_spend_asks_open"}


def test_the_spend_service_exports_what_its_dashboard_row_reads() -> None:
    emitted = spend_exported_names()
    assert emitted >= SPEND_METRICS, SPEND_METRICS - emitted


def test_the_lab_exports_what_its_dashboard_row_reads() -> None:
    emitted = lab_exported_names()
    assert emitted >= LAB_METRICS, LAB_METRICS - emitted


@pytest.fixture(scope="module")
def flows_emitted() -> set[str]:
    return flows_exported_names()


def test_the_flows_service_exports_what_its_dashboard_reads(flows_emitted: set[str]) -> None:
    assert flows_emitted >= FLOWS_METRICS, FLOWS_METRICS - flows_emitted


@pytest.mark.parametrize("path", DASHBOARDS, ids=lambda p: p.stem)
def test_every_queried_metric_is_emitted(
    path: Path, emitted: set[str], request: pytest.FixtureRequest
) -> None:
    if path.stem == "flows":
        emitted = emitted | request.getfixturevalue("flows_emitted")
    if path.stem == "pipeline-health":
        emitted = emitted | console_exported_names() | lab_exported_names()
        emitted |= spend_exported_names() | scheduler_exported_names()
    if path.stem == "runs-overview":  # runs asleep and woken: the scheduler's
        emitted = emitted | scheduler_exported_names()
    dashboard = json.loads(path.read_text())
    queried = set().union(*(queried_metrics(e) for e in dashboard_queries(dashboard)))
    assert queried, f"{path.name} queries nothing"
    assert queried <= emitted, f"{path.name} queries metrics nobody emits: {queried - emitted}"


def test_the_dashboards_exist_and_are_provisioned() -> None:
    assert {p.stem for p in DASHBOARDS} == {
        "runs-overview",
        "agent-cost-tokens",
        "pipeline-health",
        "memory",
        "flows",
    }
    uids = [json.loads(p.read_text())["uid"] for p in DASHBOARDS]
    assert len(set(uids)) == len(uids)
    provider = yaml.safe_load(
        (ROOT / "deploy/grafana/provisioning/dashboards/dashboards.yaml").read_text()
    )
    assert provider["providers"][0]["options"]["path"] == "/var/lib/grafana/dashboards"
    sources = yaml.safe_load(
        (ROOT / "deploy/grafana/provisioning/datasources/datasources.yaml").read_text()
    )
    uids_used = {
        t["datasource"]["uid"]
        for p in DASHBOARDS
        for panel in json.loads(p.read_text())["panels"]
        for t in panel.get("targets", [])  # a row panel groups the ones under it: no query
    }
    assert uids_used <= {d["uid"] for d in sources["datasources"]}
