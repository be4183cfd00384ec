"""The console's own numbers: requests by route and status class and their duration, the
pages following the streams live, and the live records sent to them.

OpenTelemetry instruments (Prometheus names in brackets): nexus.console.requests
[nexus_console_requests_total{route,status}], nexus.console.request.duration
[nexus_console_request_duration_seconds_bucket{route}], nexus.console.live.pages
[nexus_console_live_pages], nexus.console.live.records [nexus_console_live_records_total].
"""

from __future__ import annotations

from opentelemetry.metrics import MeterProvider, NoOpMeterProvider


class ConsoleMetrics:
    def __init__(self, provider: MeterProvider | None = None) -> None:
        meter = (provider or NoOpMeterProvider()).get_meter("nexus_console")
        self._requests = meter.create_counter(
            "nexus.console.requests",
            unit="{request}",
            description="Requests the console answered, by route template and status class.",
        )
        self._duration = meter.create_histogram(
            "nexus.console.request.duration",
            unit="s",
            description="Seconds from a request's arrival to its answer (live feeds excluded).",
        )
        self._pages = meter.create_up_down_counter(
            "nexus.console.live.pages",
            unit="{page}",
            description="Pages following the streams live (open server-sent event feeds).",
        )
        self._records = meter.create_counter(
            "nexus.console.live.records",
            unit="{record}",
            description="Live records (server-sent events) sent to pages.",
        )

    def request(self, route: str, status: int, seconds: float | None) -> None:
        self._requests.add(1, {"route": route, "status": f"{status // 100}xx"})
        if seconds is not None:
            self._duration.record(seconds, {"route": route})

    def live_page(self, opened: bool) -> None:
        self._pages.add(1 if opened else -1)

    def live_records(self, n: int) -> None:
        self._records.add(n)
