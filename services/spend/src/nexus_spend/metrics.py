"""The spend service's metrics (OpenTelemetry; Prometheus names in brackets): USD, tokens and
model calls settled [nexus_spend_cost_usd_total, nexus_spend_tokens_total,
nexus_spend_calls_total] labelled by team, agent and model only (task, flow run and day would
grow without bound), and the calls held in flight and asks open [nexus_spend_holds,
nexus_spend_asks_open], read from the tables by the projecting replica. Counted when a batch
commits, so a batch applied again after a crash may count twice. Without a MeterProvider they
are no-ops."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import asyncpg
from nexus_events.transport.projection import quote_ident
from opentelemetry.metrics import CallbackOptions, MeterProvider, NoOpMeterProvider, Observation

from nexus_spend.decide import AskState
from nexus_spend.projection import CallCounted
from nexus_spend.schema import LIVE_SCHEMA, SCHEMA

COST = "nexus.spend.cost_usd"
TOKENS = "nexus.spend.tokens"
CALLS = "nexus.spend.calls"
HOLDS = "nexus.spend.holds"
ASKS_OPEN = "nexus.spend.asks_open"


class SpendMetrics:
    def __init__(self, provider: MeterProvider | None = None) -> None:
        meter = (provider or NoOpMeterProvider()).get_meter("nexus_spend")
        self._cost = meter.create_counter(
            COST, unit="{USD}", description="USD of the model calls settled."
        )
        self._tokens = meter.create_counter(
            TOKENS, unit="{token}", description="Tokens (in + out) of the model calls settled."
        )
        self._calls = meter.create_counter(CALLS, unit="{call}", description="Model calls settled.")
        # None until the projecting replica has read them: a standby exports nothing.
        self.holds: int | None = None
        self.asks_open: int | None = None
        meter.create_observable_gauge(
            HOLDS,
            callbacks=[self._observe_holds],
            unit="{call}",
            description="Model calls in flight holding a reservation.",
        )
        meter.create_observable_gauge(
            ASKS_OPEN,
            callbacks=[self._observe_asks],
            unit="{ask}",
            description="Budget asks waiting for an answer.",
        )

    def count(self, calls: Iterable[CallCounted]) -> None:
        """Count what a committed batch settled."""
        for c in calls:
            labels = {"team": c.team or "", "agent": c.agent or "", "model": c.model or ""}
            if c.usage.cost_usd:
                self._cost.add(max(0.0, c.usage.cost_usd), labels)
            if c.usage.tokens:
                self._tokens.add(max(0, c.usage.tokens), labels)
            if c.new_call:
                self._calls.add(1, labels)

    async def read_gauges(
        self, pool: asyncpg.Pool[Any], schema: str = SCHEMA, live_schema: str = LIVE_SCHEMA
    ) -> None:
        """Read the gauges' values (the leader, after a batch and on its interval)."""
        self.holds = int(
            await pool.fetchval(
                f"SELECT count(*) FROM (SELECT DISTINCT run_id, turn"
                f" FROM {quote_ident(live_schema)}.holds) AS calls"
            )
        )
        self.asks_open = int(
            await pool.fetchval(
                f"SELECT count(*) FROM {quote_ident(schema)}.asks WHERE state = $1",
                AskState.OPEN,
            )
        )

    def _observe_holds(self, _: CallbackOptions) -> Iterable[Observation]:
        if self.holds is not None:
            yield Observation(self.holds)

    def _observe_asks(self, _: CallbackOptions) -> Iterable[Observation]:
        if self.asks_open is not None:
            yield Observation(self.asks_open)
