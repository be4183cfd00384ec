"""`SpendDouble`: the spend service's queries (docs/spend.md) answered for the console's tests.

The spend service is built beside the console and has not landed yet: ``nexus.spend.v1.usage``,
``budgets.list`` and ``runs`` are answered here by a real nats.micro service on the test's real
NATS, built with the `nexus_events.transport.micro` helpers every Nexus query uses, validating
requests as the contract's `UsageQuery`/`BudgetsList`/`RunsSpend` and answering its
`UsageReport`/`BudgetsReply`/`RunsSpendReply`. Swap it for the real service once it is merged.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from nexus_events.contract import subjects
from nexus_events.events.spend import (
    BudgetsList,
    BudgetsReply,
    BudgetView,
    RunSpend,
    RunsSpend,
    RunsSpendReply,
    UsageGroup,
    UsageLine,
    UsageQuery,
    UsageReport,
)
from nexus_events.transport.bus import Bus
from nexus_events.transport.micro import endpoint_handler, start_service, stop_service


def line(key: str | None, cost: float, runs: int = 1, tokens: int = 100) -> UsageLine:
    return UsageLine(
        key=key, runs=runs, turns=runs, tokens_in=tokens, tokens_out=tokens // 10,
        cost_usd=cost, wall_seconds=1.0,
    )  # fmt: skip


class SpendDouble:
    """Answers from what the test sets; records every usage query it was asked."""

    def __init__(self) -> None:
        self.usage_rows: dict[UsageGroup, list[UsageLine]] = {}
        self.budgets: list[BudgetView] = []
        self.runs: dict[str, RunSpend] = {}
        self.asked: list[UsageQuery] = []

    async def usage(self, query: UsageQuery) -> UsageReport:
        self.asked.append(query)
        rows = self.usage_rows.get(query.by, [])[: query.limit]
        total = line(None, sum(r.cost_usd for r in rows), sum(r.runs for r in rows), 0)
        return UsageReport(by=query.by, rows=rows, total=total)

    async def budgets_list(self, query: BudgetsList) -> BudgetsReply:
        return BudgetsReply(budgets=self.budgets)

    async def runs_spend(self, query: RunsSpend) -> RunsSpendReply:
        return RunsSpendReply(runs=[self.runs[r] for r in query.run_ids if r in self.runs])


@pytest.fixture
async def spend(bus: Bus) -> AsyncIterator[SpendDouble]:
    double = SpendDouble()
    service = await start_service(
        bus.nc,
        "spend-double",
        "the spend service's queries, answered by the console's tests",
        [
            ("usage", subjects.SPEND_USAGE, endpoint_handler(UsageQuery, double.usage)),
            (
                "budgets-list",
                subjects.SPEND_BUDGETS_LIST,
                endpoint_handler(BudgetsList, double.budgets_list),
            ),
            ("runs", subjects.SPEND_RUNS, endpoint_handler(RunsSpend, double.runs_spend)),
        ],
    )
    try:
        yield double
    finally:
        await stop_service(service)
