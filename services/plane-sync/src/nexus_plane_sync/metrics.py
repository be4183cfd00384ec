"""plane-sync's counters: webhooks by outcome, writes by outcome, and the mirror lag.

Webhook deliveries are OpenTelemetry counters (Prometheus names in brackets): what each
delivery came to [nexus_plane_sync_webhooks_total{outcome}] and, for a delivery that made no
Nexus command, why [nexus_plane_sync_webhooks_ignored_total{reason}]. The same numbers are
kept in `webhooks` for this process (tests read them; an ignored one as ``ignored:<reason>``);
the totals `nexus plane status` shows are kept in PostgreSQL (`PlaneStore.count_webhooks`), so
they survive a restart. Writes and the lag samples (seconds from a run event's JetStream time
to its write landing on Plane, read by the bench) are plain in-process numbers.
"""

from __future__ import annotations

from collections import Counter, deque

from opentelemetry.metrics import MeterProvider, NoOpMeterProvider

LAG_SAMPLES = 10_000  # the last writes' lags kept for percentiles
WEBHOOKS = "nexus.plane_sync.webhooks"
IGNORED = "nexus.plane_sync.webhooks.ignored"
IGNORED_PREFIX = "ignored:"  # the key of an ignored delivery's reason among the counters


class PlaneSyncMetrics:
    def __init__(self, provider: MeterProvider | None = None) -> None:
        meter = (provider or NoOpMeterProvider()).get_meter("nexus_plane_sync")
        self._webhooks = meter.create_counter(
            WEBHOOKS, unit="{delivery}", description="Plane webhook deliveries by outcome."
        )
        self._ignored = meter.create_counter(
            IGNORED,
            unit="{delivery}",
            description="Plane webhook deliveries that made no Nexus command, by reason.",
        )
        self.webhooks: Counter[str] = Counter()
        self.writes: Counter[str] = Counter()
        self.lags: deque[float] = deque(maxlen=LAG_SAMPLES)

    def webhook(self, outcome: str, n: int = 1) -> None:
        """outcome: accepted, duplicate, bad_signature, ..., runs_requested, messages, ..."""
        if outcome.startswith(IGNORED_PREFIX):
            self._ignored.add(n, {"reason": outcome.removeprefix(IGNORED_PREFIX)})
        else:
            self._webhooks.add(n, {"outcome": outcome})
        self.webhooks[outcome] += n
