"""The spend service's tables on a real PostgreSQL, with rows written where the projection
(nexus_spend.projection, not under test here) would write them, and the streams read back."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

import asyncpg
from nexus_events.contract.streams import BUDGETS
from nexus_events.events import (
    BudgetAskClosed,
    BudgetAskOpened,
    BudgetExtended,
    Budgets,
    ModelSpec,
    RunConfig,
    RunPrepared,
    RuntimeSpec,
)
from nexus_events.events.base import Event
from nexus_events.events.budgets import BudgetDefinition
from nexus_events.events.spend import SpendReserve
from nexus_events.transport.bus import Bus, decode_msg

from nexus_spend.decide import AskState
from nexus_spend.schema import LIVE_SCHEMA, SCHEMA, create_live_tables, create_projection_tables

AT = datetime(2026, 11, 28, 13, 0, tzinfo=UTC)
SCOPE = "budget alpha-monthly: team:alpha month 2026-11"


def alpha(cost: float, **kw: Any) -> BudgetDefinition:
    body: dict[str, Any] = {
        "id": "alpha-monthly",
        "scope": "team:alpha",
        "period": "month",
        "limits": {"cost_usd": cost},
        **kw,
    }
    return BudgetDefinition.model_validate(body)


ASK = {"on_exceed": "ask", "ask": {"extend_cost_usd": 2, "expires_in": 60}}


def call(turn: int = 1, cost: float = 1.0) -> SpendReserve:
    return SpendReserve(turn=turn, cost_usd=cost, tokens=100)


async def holds(pool: asyncpg.Pool[Any]) -> list[asyncpg.Record]:
    return await pool.fetch(f"SELECT * FROM {LIVE_SCHEMA}.holds ORDER BY run_id, turn")


async def create_tables(pool: asyncpg.Pool[Any]) -> None:
    async with pool.acquire() as conn:
        await conn.execute(f"CREATE SCHEMA IF NOT EXISTS {SCHEMA}")
        await create_projection_tables(conn, SCHEMA)
        await create_live_tables(conn)


async def put_budget(pool: asyncpg.Pool[Any], budget: BudgetDefinition, revision: int = 1) -> None:
    await pool.execute(
        f"""INSERT INTO {SCHEMA}.budgets (budget_id, revision, deleted, definition)
            VALUES ($1, $2, false, $3)
            ON CONFLICT (budget_id) DO UPDATE SET revision = $2, definition = $3""",
        budget.id,
        revision,
        budget.model_dump_json(),
    )


async def put_run(
    pool: asyncpg.Pool[Any],
    run_id: str,
    *,
    team: str | None = "alpha",
    agent_id: str = "impl",
    task_id: str | None = None,
    flow: str | None = None,
    flow_run_id: str | None = None,
) -> None:
    """A run as the projection has it once it folded `requested` and `prepared`."""
    await pool.execute(
        f"""INSERT INTO {SCHEMA}.runs (run_id, first_seq, team, agent_id, task_id, flow,
                flow_run_id, requested_at, model)
            VALUES ($1, 1, $2, $3, $4, $5, $6, now(), 'fake-model')""",
        run_id,
        team,
        agent_id,
        task_id,
        flow,
        flow_run_id,
    )


async def put_spent(
    pool: asyncpg.Pool[Any], scope: str, name: str, period: str, bucket: str, cost: float
) -> None:
    await pool.execute(
        f"""INSERT INTO {SCHEMA}.ledger (scope, name, period, bucket, cost_usd, tokens, calls)
            VALUES ($1, $2, $3, $4, $5, 0, 1)
            ON CONFLICT (scope, name, period, bucket) DO UPDATE SET cost_usd = $5""",
        scope,
        name,
        period,
        bucket,
        cost,
    )


def prepared(run_id: str, *, agent_id: str = "impl", team: str | None = None) -> RunPrepared:
    return RunPrepared(
        config=RunConfig(
            run_id=run_id,
            agent_id=agent_id,
            team=team,
            system_prompt="You implement things.",
            model=ModelSpec(name="fake-model"),
            budgets=Budgets(max_wall_seconds=3600),
            runtime=RuntimeSpec(cpu="500m", memory="1Gi"),
        )
    )


async def events(bus: Bus, stream: str, subject: str) -> list[Event]:
    return [decode_msg(m).event async for m in bus.replay_raw(stream, filter_subject=subject)]


async def fold_budget_record(bus: Bus, pool: asyncpg.Pool[Any]) -> None:
    """What the projection does with NEXUS_BUDGETS: asks, extensions, closings."""
    async for msg in bus.replay_raw(BUDGETS):
        e = decode_msg(msg).event
        at: datetime | None = None
        if isinstance(e, BudgetAskOpened):
            await pool.execute(
                f"""INSERT INTO {SCHEMA}.asks (ask_id, budget_id, revision, instance, bucket,
                        round, state, approval_id, expires_at)
                    VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) ON CONFLICT DO NOTHING""",
                e.ask_id,
                e.budget_id,
                e.revision,
                e.instance,
                e.bucket,
                e.round,
                AskState.OPEN,
                e.approval_id,
                e.expires_at,
            )
        elif isinstance(e, BudgetExtended):
            await pool.execute(
                f"""INSERT INTO {SCHEMA}.extensions (ask_id, budget_id, revision, instance,
                        bucket, cost_usd, tokens, runs) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
                    ON CONFLICT DO NOTHING""",
                e.ask_id,
                e.budget_id,
                e.revision,
                e.instance,
                e.bucket,
                e.cost_usd,
                e.tokens,
                e.runs,
            )
            await _close(pool, e.ask_id, AskState.APPROVED, at)
        elif isinstance(e, BudgetAskClosed):
            await _close(pool, e.ask_id, AskState(e.decision), at)


async def _close(
    pool: asyncpg.Pool[Any], ask_id: str, state: AskState, at: datetime | None
) -> None:
    await pool.execute(
        f"UPDATE {SCHEMA}.asks SET state = $2, closed_at = $3 WHERE ask_id = $1 AND state = $4",
        ask_id,
        state,
        at,
        AskState.OPEN,
    )


async def until(probe: Callable[[], Awaitable[bool]], what: str, within: float = 10.0) -> None:
    deadline = asyncio.get_running_loop().time() + within
    while not await probe():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.05)
