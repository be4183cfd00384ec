"""Memory's metrics (OpenTelemetry; Prometheus names in brackets): search latency
[nexus_memory_search_seconds], writes by outcome [nexus_memory_records_total] and
extractions by status [nexus_memory_extractions_total]. Without a MeterProvider they are
no-ops, so logic stays testable without an exporter."""

from __future__ import annotations

from opentelemetry.metrics import MeterProvider, NoOpMeterProvider

SEARCH_SECONDS = "nexus.memory.search"
RECORDS = "nexus.memory.records"
EXTRACTIONS = "nexus.memory.extractions"


class MemoryMetrics:
    def __init__(self, provider: MeterProvider | None = None) -> None:
        meter = (provider or NoOpMeterProvider()).get_meter("nexus_memory")
        self._search = meter.create_histogram(
            SEARCH_SECONDS, unit="s", description="Search time inside the memory service."
        )
        self._records = meter.create_counter(
            RECORDS, unit="{memory}", description="Memory writes by outcome."
        )
        self._extractions = meter.create_counter(
            EXTRACTIONS, unit="{run}", description="Extractions after runs, by status."
        )

    def search(self, seconds: float, *, strict: bool) -> None:
        self._search.record(seconds, {"strict": strict})

    def record(self, outcome: str) -> None:
        """outcome: recorded, redacted or blocked."""
        self._records.add(1, {"outcome": outcome})

    def extraction(self, status: str) -> None:
        self._extractions.add(1, {"status": status})
