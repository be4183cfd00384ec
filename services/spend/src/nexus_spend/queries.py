"""``nexus.spend.v1.usage|budgets.list|budgets.get|runs`` from the projection ``spend``, as
the `nexus-spend` nats.micro service's query endpoints (validation, 400/404 and 500s as every
Nexus micro service); where each scope stands is nexus_spend.standing's."""

from __future__ import annotations

import functools
from typing import Any

import asyncpg
from nexus_events.contract import subjects
from nexus_events.events.budgets import BudgetDefinition, ScopeKind
from nexus_events.events.spend import (
    BudgetGet,
    BudgetsList,
    BudgetsReply,
    BudgetView,
    RunSpend,
    RunsSpend,
    RunsSpendReply,
    ScopeStanding,
    StandingState,
    UsageQuery,
    UsageReport,
)
from nexus_events.runtime.clock import Clock, SystemClock
from nexus_events.transport import micro
from nexus_events.transport.micro import Handler, QueryError
from nexus_events.transport.projection import quote_ident

from nexus_spend import usage_sql
from nexus_spend.budget_record import live_budgets
from nexus_spend.coverage import RunScopes
from nexus_spend.schema import SCHEMA
from nexus_spend.standing import standings_for_budget, standings_for_run

SERVICE_NAME = "nexus-spend"
endpoint_handler = functools.partial(micro.endpoint_handler, service="spend")


class SpendQueries:
    def __init__(
        self,
        nc: Any,
        pool: asyncpg.Pool[Any],
        *,
        schema: str = SCHEMA,
        clock: Clock | None = None,
    ) -> None:
        self.nc = nc
        self.pool = pool
        self.schema = schema
        self.q = quote_ident(schema)
        self.clock: Clock = clock or SystemClock()

    def endpoints(self) -> list[tuple[str, str, Handler]]:
        h = endpoint_handler
        return [
            ("usage", subjects.SPEND_USAGE, h(UsageQuery, self.usage)),
            ("budgets-list", subjects.SPEND_BUDGETS_LIST, h(BudgetsList, self.budgets_list)),
            ("budgets-get", subjects.SPEND_BUDGETS_GET, h(BudgetGet, self.budgets_get)),
            ("runs", subjects.SPEND_RUNS, h(RunsSpend, self.runs)),
        ]

    async def usage(self, query: UsageQuery) -> UsageReport:
        if query.since and query.until and query.until <= query.since:
            raise QueryError(400, "until must be after since")
        sql, args = usage_sql.grouped(self.q, query)
        total_sql, total_args = usage_sql.total(self.q, query)
        async with self.pool.acquire() as conn:
            rows = await conn.fetch(sql, *args)
            total = await conn.fetchrow(total_sql, *total_args)
        assert total is not None  # an aggregate without GROUP BY has one row
        return UsageReport(
            by=query.by, rows=[usage_sql.line(r) for r in rows], total=usage_sql.line(total)
        )

    async def budgets_list(self, query: BudgetsList) -> BudgetsReply:
        now = self.clock.now()
        async with self.pool.acquire() as conn:
            views = []
            for budget, revision in await live_budgets(conn, self.q):
                scope = budget.scope
                if query.team is not None and (
                    scope.kind is not ScopeKind.TEAM or scope.name != query.team
                ):
                    continue
                standings = await standings_for_budget(
                    conn, budget, revision, now, schema=self.schema
                )
                views.append(BudgetView(revision=revision, budget=budget, standings=standings))
        return BudgetsReply(budgets=views)

    async def budgets_get(self, query: BudgetGet) -> BudgetView:
        async with self.pool.acquire() as conn:
            row = await conn.fetchrow(
                f"SELECT definition, revision FROM {self.q}.budgets"
                " WHERE budget_id = $1 AND NOT deleted",
                query.id,
            )
            if row is None:
                raise QueryError(404, f"no budget {query.id!r}")
            budget = BudgetDefinition.model_validate_json(row["definition"])
            standings = await standings_for_budget(
                conn, budget, row["revision"], self.clock.now(), schema=self.schema
            )
        return BudgetView(revision=row["revision"], budget=budget, standings=standings)

    async def runs(self, query: RunsSpend) -> RunsSpendReply:
        now = self.clock.now()
        async with self.pool.acquire() as conn:
            rows = await conn.fetch(
                f"""SELECT run_id AS key, run_id, team, agent_id, task_id, flow, flow_run_id,
                        status, 1 AS runs, calls AS turns, tokens_in, tokens_out, cost_usd,
                        CASE WHEN ended_at IS NULL THEN 0 ELSE wall_seconds END AS wall_seconds
                    FROM {self.q}.runs WHERE run_id = ANY($1::text[])""",
                list(query.run_ids),
            )
            budgets = await live_budgets(conn, self.q)
            by_id = {r["run_id"]: r for r in rows}
            out = []
            for run_id in dict.fromkeys(query.run_ids):
                row = by_id.get(run_id)
                if row is None:
                    continue
                scopes = RunScopes(
                    run_id,
                    agent_id=row["agent_id"],
                    team=row["team"],
                    task_id=row["task_id"],
                    flow=row["flow"],
                    flow_run_id=row["flow_run_id"],
                )
                standings = await standings_for_run(conn, scopes, budgets, now, schema=self.schema)
                waiting = None if row["status"] is not None else waiting_for(standings)
                out.append(
                    RunSpend(
                        run_id=run_id,
                        team=row["team"],
                        usage=usage_sql.line(row),
                        scopes=standings,
                        waiting_for=waiting,
                    )
                )
        return RunsSpendReply(runs=out)


def waiting_for(standings: list[ScopeStanding]) -> str | None:
    """Why a run not ended waits on a budget: a covering scope asking its approvers."""
    for s in standings:
        if s.state is StandingState.ASKING:
            ask = f" (ask {s.ask_id})" if s.ask_id else ""
            return f"budget {s.budget_id}: {s.instance} {s.bucket} reached, asking for more{ask}"
    return None
