"""plane-sync's webhook counters reach the exporters (OpenTelemetry, read back in memory):
outcomes as nexus.plane_sync.webhooks, ignored deliveries by reason on their own counter."""

from __future__ import annotations

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from nexus_plane_sync.metrics import IGNORED, WEBHOOKS, PlaneSyncMetrics


def test_ignored_deliveries_are_counted_by_reason() -> None:
    reader = InMemoryMetricReader()
    metrics = PlaneSyncMetrics(MeterProvider(metric_readers=[reader]))
    metrics.webhook("accepted")
    metrics.webhook("ignored:echo")
    metrics.webhook("ignored:echo")
    metrics.webhook("ignored:unknown_action")
    data = reader.get_metrics_data()
    assert data is not None
    points: dict[tuple[str, tuple[tuple[str, object], ...]], int] = {}
    for resource in data.resource_metrics:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                for point in metric.data.data_points:
                    key = (metric.name, tuple(sorted((point.attributes or {}).items())))
                    points[key] = int(point.value)  # type: ignore[union-attr]
    assert points == {
        (WEBHOOKS, (("outcome", "accepted"),)): 1,
        (IGNORED, (("reason", "echo"),)): 2,
        (IGNORED, (("reason", "unknown_action"),)): 1,
    }
    assert metrics.webhooks == {"accepted": 1, "ignored:echo": 2, "ignored:unknown_action": 1}
