"""A stand-in for the spend service's queries in the CLI tests: answers nexus.spend.v1.usage,
budgets.list|get and runs on the test's real NATS with the contract's reply models (the
service itself is built apart, services/spend)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from nats.aio.msg import Msg
from nexus_events.contract import subjects
from nexus_events.events.spend import (
    BudgetGet,
    BudgetsList,
    BudgetsReply,
    BudgetView,
    RunSpend,
    RunsSpend,
    RunsSpendReply,
    UsageQuery,
    UsageReport,
)
from nexus_events.transport.bus import Bus


class SpendResponder:
    """Answers from what the test gives it; records every query it was asked."""

    def __init__(
        self,
        usage: UsageReport | None = None,
        budgets: list[BudgetView] | None = None,
        runs: list[RunSpend] | None = None,
    ) -> None:
        self.usage = usage
        self.budgets = {v.budget.id: v for v in budgets or []}
        self.runs = {r.run_id: r for r in runs or []}
        self.queries: list[Any] = []

    async def on_usage(self, msg: Msg) -> None:
        query = UsageQuery.model_validate_json(msg.data)
        self.queries.append(query)
        assert self.usage is not None, "the test gave the stand-in no usage report"
        await msg.respond(self.usage.model_dump_json().encode())

    async def on_list(self, msg: Msg) -> None:
        query = BudgetsList.model_validate_json(msg.data)
        self.queries.append(query)
        found = [
            v
            for _, v in sorted(self.budgets.items())
            if query.team is None or v.budget.scope.name == query.team
        ]
        await msg.respond(BudgetsReply(budgets=found).model_dump_json().encode())

    async def on_get(self, msg: Msg, nc: Any) -> None:
        query = BudgetGet.model_validate_json(msg.data)
        self.queries.append(query)
        view = self.budgets.get(query.id)
        if view is not None:
            await msg.respond(view.model_dump_json().encode())
            return
        # The error shape of a nats.micro service (what the CLI's query maps to exit 3).
        body = {"error": {"code": 404, "message": f"no budget {query.id!r}"}}
        await nc.publish(
            msg.reply,
            json.dumps(body).encode(),
            headers={"Nats-Service-Error-Code": "404", "Nats-Service-Error": "not found"},
        )

    async def on_runs(self, msg: Msg) -> None:
        query = RunsSpend.model_validate_json(msg.data)
        self.queries.append(query)
        found = [self.runs[r] for r in query.run_ids if r in self.runs]
        await msg.respond(RunsSpendReply(runs=found).model_dump_json().encode())


@asynccontextmanager
async def spend_service(bus: Bus, responder: SpendResponder) -> AsyncIterator[SpendResponder]:
    nc = bus.nc

    async def on_get(msg: Msg) -> None:
        await responder.on_get(msg, nc)

    subs = [
        await nc.subscribe(subjects.SPEND_USAGE, cb=responder.on_usage),
        await nc.subscribe(subjects.SPEND_BUDGETS_LIST, cb=responder.on_list),
        await nc.subscribe(subjects.SPEND_BUDGETS_GET, cb=on_get),
        await nc.subscribe(subjects.SPEND_RUNS, cb=responder.on_runs),
    ]
    await nc.flush()
    try:
        yield responder
    finally:
        for sub in subs:
            await sub.unsubscribe()
