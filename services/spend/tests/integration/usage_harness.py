"""Real NATS and PostgreSQL around the spend projection: runs published on NEXUS_RUNS as a
runner would (requested, prepared, started, turns, condensations, an ending), the projection's
runner on the test's bus and database, and the query endpoints."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import asyncpg
from nexus_events.contract import subjects
from nexus_events.events import (
    RunCompleted,
    RunCondensed,
    RunPrepared,
    RunRequested,
    RunStarted,
    RunTurn,
)
from nexus_events.events.budgets import BudgetApplied, BudgetDefinition
from nexus_events.events.runs import Condensation, RunConfig
from nexus_events.transport import micro
from nexus_events.transport.bus import Bus
from nexus_events.transport.micro import QueryReply, read_reply

from nexus_spend.metrics import SpendMetrics
from nexus_spend.projection import SpendProjection
from nexus_spend.projection_runner import SpendRunner
from nexus_spend.queries import SERVICE_NAME, SpendQueries


@dataclass
class Run:
    """One run as published: its scopes and its model calls (turn -> tokens in, out, USD)."""

    run_id: str
    agent: str = "impl"
    team: str | None = "alpha"
    model: str = "m-small"
    task_id: str | None = None
    flow: str | None = None
    flow_run_id: str | None = None
    turns: list[tuple[int, int, int, float]] = field(default_factory=list)
    condensed: list[tuple[int, int, int, float]] = field(default_factory=list)
    ends: bool = True


async def publish(bus: Bus, run_id: str, event: Any) -> int:
    ack = await bus.publish(subjects.run_event(run_id, event.event_name), event)
    return int(ack.seq)


async def publish_run(bus: Bus, run: Run) -> int:
    """Every event of `run`; returns the last sequence."""
    labels = {}
    if run.flow is not None and run.flow_run_id is not None:
        labels = {"flow": run.flow, "flow_run_id": run.flow_run_id}
    rid = run.run_id
    await publish(bus, rid, RunRequested(agent_id=run.agent, task_id=run.task_id, labels=labels))
    config = RunConfig.model_validate(
        {
            "run_id": rid,
            "agent_id": run.agent,
            "task_id": run.task_id,
            "system_prompt": "p",
            "model": {"name": run.model},
            "catalog_revisions": {f"agent/{run.agent}": 2},
            "team": run.team,
        }
    )
    await publish(bus, rid, RunPrepared(config=config))
    seq = await publish(bus, rid, RunStarted())
    for turn, tin, tout, cost in run.condensed:
        seq = await publish(bus, rid, condensation(turn, tin, tout, cost))
    for turn, tin, tout, cost in run.turns:
        seq = await publish(
            bus, rid, RunTurn(turn=turn, tokens_in=tin, tokens_out=tout, cost_usd=cost)
        )
    if run.ends:
        seq = await publish(bus, rid, RunCompleted())
    return seq


def condensation(turn: int, tin: int, tout: int, cost: float) -> RunCondensed:
    return RunCondensed(
        turn=turn,
        tokens_before=1000,
        tokens_after=200,
        budget=800,
        counter="estimate",
        condensation=Condensation.model_validate({"strategy": "summarise", "summary": "s"}),
        llm_tokens_in=tin,
        llm_tokens_out=tout,
        cost_usd=cost,
    )


async def apply_budget(bus: Bus, body: dict[str, Any]) -> int:
    budget = BudgetDefinition.model_validate(body)
    ack = await bus.publish(
        subjects.catalog_event(subjects.CatalogKind.BUDGET, budget.id, "applied"),
        BudgetApplied(budget=budget, applied_by="test"),
    )
    return int(ack.seq)


@asynccontextmanager
async def projecting(bus: Bus, pool: asyncpg.Pool[Any]) -> AsyncIterator[SpendRunner]:
    """The projection's runner (always the leader here) until the block ends."""

    async def leader() -> bool:
        return True

    runner = SpendRunner(
        bus, pool, SpendProjection(), metrics=SpendMetrics(), fence=leader, fetch_timeout=0.2
    )
    await runner.setup()
    await runner.start()
    try:
        yield runner
    finally:
        await runner.stop()


@asynccontextmanager
async def serving(bus: Bus, pool: asyncpg.Pool[Any]) -> AsyncIterator[SpendQueries]:
    queries = SpendQueries(bus.nc, pool)
    service = await micro.start_service(bus.nc, SERVICE_NAME, "test", queries.endpoints())
    try:
        yield queries
    finally:
        await micro.stop_service(service)


async def ask(bus: Bus, subject: str, body: dict[str, Any] | bytes) -> QueryReply:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    return read_reply(await bus.nc.request(subject, data, timeout=5))
