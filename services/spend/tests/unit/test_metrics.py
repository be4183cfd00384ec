"""What the spend service counts when a batch commits, read back from an in-memory
OpenTelemetry reader: USD, tokens and calls by team, agent and model only."""

from __future__ import annotations

from typing import Any

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from nexus_spend.metrics import ASKS_OPEN, CALLS, COST, HOLDS, TOKENS, SpendMetrics
from nexus_spend.projection import CallCounted
from nexus_spend.usage_fold import CallUsage


def points(reader: InMemoryMetricReader) -> dict[str, dict[tuple[tuple[str, Any], ...], float]]:
    data = reader.get_metrics_data()
    assert data is not None
    out: dict[str, dict[tuple[tuple[str, Any], ...], float]] = {}
    for rm in data.resource_metrics:
        for sm in rm.scope_metrics:
            for m in sm.metrics:
                for p in m.data.data_points:
                    key = tuple(sorted((p.attributes or {}).items()))
                    out.setdefault(m.name, {})[key] = p.value  # type: ignore[union-attr]
    return out


def test_calls_are_counted_by_team_agent_and_model_and_a_repeat_adds_no_call() -> None:
    reader = InMemoryMetricReader()
    metrics = SpendMetrics(MeterProvider(metric_readers=[reader]))
    metrics.count(
        [
            CallCounted("alpha", "impl", "m", CallUsage(100, 10, 0.5), new_call=True),
            CallCounted("alpha", "impl", "m", CallUsage(20, 0, 0.25), new_call=False),
            CallCounted(None, "impl", "m", CallUsage(1, 1, 0.0), new_call=True),
        ]
    )
    got = points(reader)
    alpha = (("agent", "impl"), ("model", "m"), ("team", "alpha"))
    none = (("agent", "impl"), ("model", "m"), ("team", ""))
    assert got[COST] == {alpha: 0.75}
    assert got[TOKENS] == {alpha: 130, none: 2}
    assert got[CALLS] == {alpha: 1, none: 1}
    assert HOLDS not in got  # nothing read yet: a standby exports no gauge
    metrics.holds, metrics.asks_open = 3, 1
    got = points(reader)
    assert (got[HOLDS], got[ASKS_OPEN]) == ({(): 3}, {(): 1})
