"""The gateway's metrics (OpenTelemetry; Prometheus names in brackets): inbound requests by
channel and outcome [nexus_gateway_inbound_total], sends by channel and status
[nexus_gateway_sends_total], approval answers by outcome [nexus_gateway_approvals_total],
delegations by outcome [nexus_gateway_delegations_total].

The counts are also kept in `counts` (the same numbers, in process): tests and the health
log read them without an exporter.
"""

from __future__ import annotations

from collections import Counter

from opentelemetry.metrics import MeterProvider, NoOpMeterProvider

INBOUND = "nexus.gateway.inbound"
SENDS = "nexus.gateway.sends"
APPROVALS = "nexus.gateway.approvals"
DELEGATIONS = "nexus.gateway.delegations"


class GatewayMetrics:
    def __init__(self, provider: MeterProvider | None = None) -> None:
        meter = (provider or NoOpMeterProvider()).get_meter("nexus_channel_gateway")
        self._inbound = meter.create_counter(
            INBOUND, unit="{request}", description="Inbound requests by channel and outcome."
        )
        self._sends = meter.create_counter(
            SENDS, unit="{message}", description="Outbound messages by channel and status."
        )
        self._approvals = meter.create_counter(
            APPROVALS, unit="{answer}", description="Approval answers from chat by outcome."
        )
        self._delegations = meter.create_counter(
            DELEGATIONS, unit="{delegation}", description="Delegations by outcome."
        )
        self.counts: Counter[tuple[str, str, str]] = Counter()

    def inbound(self, channel: str, outcome: str) -> None:
        """outcome: accepted, duplicate, forged, stale, malformed, oversized, unpaired, ..."""
        self._inbound.add(1, {"channel": channel, "outcome": outcome})
        self.counts["inbound", channel, outcome] += 1

    def send(self, channel: str, status: str) -> None:
        """status: sent, failed, unknown, rate_limited, skipped."""
        self._sends.add(1, {"channel": channel, "status": status})
        self.counts["send", channel, status] += 1

    def approval(self, channel: str, outcome: str) -> None:
        """outcome: decided, already_decided, refused (approver policy), unknown,
        gate_closed (a flow gate that no longer waits)."""
        self._approvals.add(1, {"channel": channel, "outcome": outcome})
        self.counts["approval", channel, outcome] += 1

    def delegation(self, outcome: str) -> None:
        """outcome: started, refused."""
        self._delegations.add(1, {"outcome": outcome})
        self.counts["delegation", "route", outcome] += 1
