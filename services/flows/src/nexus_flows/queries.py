"""``nexus.flows.v1.get|list`` from the flows projection, as the `nexus-flows` nats.micro
service (validation, error replies and 500s as every Nexus micro service:
nexus_events.transport.micro)."""

from __future__ import annotations

import functools
from typing import Any

import asyncpg
from nats.micro.service import Service
from nexus_events.contract import subjects
from nexus_events.events.flows import (
    STEP_ENDED,
    FlowRunView,
    FlowsGet,
    FlowsList,
    FlowsListReply,
    FlowStepView,
)
from nexus_events.transport import micro
from nexus_events.transport.micro import Handler, QueryError
from nexus_events.transport.projection import quote_ident

from nexus_flows.records import FlowState
from nexus_flows.store import SCHEMA

SERVICE_NAME = "nexus-flows"
endpoint_handler = functools.partial(micro.endpoint_handler, service="flows")


def flow_view(s: FlowState) -> FlowRunView:
    """A flow run as queries show it."""
    current = s.steps.get(s.current or "")
    steps = [
        FlowStepView(
            step=r.step,
            kind=r.kind,
            round=r.round,
            item=r.item,
            status=r.status.value,
            run_id=r.run_id,
            agent_id=r.agent_id,
            reason=r.reason,
            approval_id=r.waiting.approval_id if r.waiting else None,
            started_at=r.started_at,
            finished_at=r.finished_at,
        )
        for r in sorted(s.steps.values(), key=lambda r: r.n)
    ]
    live = current is not None and not s.terminal and current.status not in STEP_ENDED
    return FlowRunView(
        flow_run_id=s.flow_run_id,
        flow=s.flow,
        revision=s.revision,
        status=s.status,
        reason=s.reason,
        message=s.message,
        task_id=s.task_id,
        current_step=current.step if live and current else None,
        origin=s.origin.value,
        requested_by=s.requested_by,
        requested_at=s.requested_at,
        updated_at=s.updated_at,
        steps=steps,
        outputs=s.outputs,
    )


class FlowsQueries:
    def __init__(self, nc: Any, pool: asyncpg.Pool[Any], schema: str = SCHEMA) -> None:
        self.nc = nc
        self.pool = pool
        self.q = quote_ident(schema)
        self.service: Service | None = None

    async def start(self) -> None:
        h = endpoint_handler
        endpoints: list[tuple[str, str, Handler]] = [
            ("get", subjects.FLOWS_GET, h(FlowsGet, self.get)),
            ("list", subjects.FLOWS_LIST, h(FlowsList, self.list)),
        ]
        self.service = await micro.start_service(
            self.nc, SERVICE_NAME, "Nexus flows: flow runs", endpoints
        )

    async def stop(self) -> None:
        await micro.stop_service(self.service)
        self.service = None

    async def get(self, query: FlowsGet) -> FlowRunView:
        raw = await self.pool.fetchval(
            f"SELECT state FROM {self.q}.flow_runs WHERE flow_run_id = $1", query.flow_run_id
        )
        if raw is None:
            raise QueryError(404, f"no flow run {query.flow_run_id!r}")
        return flow_view(FlowState.load(raw))

    async def list(self, query: FlowsList) -> FlowsListReply:
        where: list[str] = []
        args: list[object] = []
        for column, value in (
            ("status", query.status and query.status.value),
            ("flow", query.flow),
            ("task_id", query.task_id),
        ):
            if value is not None:
                args.append(value)
                where.append(f"{column} = ${len(args)}")
        if query.cursor is not None:
            args.append(int(query.cursor))
            where.append(f"first_seq < ${len(args)}")
        args.append(query.limit + 1)
        sql = (
            f"SELECT first_seq, state FROM {self.q}.flow_runs"
            + (f" WHERE {' AND '.join(where)}" if where else "")
            + f" ORDER BY first_seq DESC LIMIT ${len(args)}"
        )
        rows = await self.pool.fetch(sql, *args)
        page = rows[: query.limit]
        more = len(rows) > query.limit
        return FlowsListReply(
            flows=[flow_view(FlowState.load(r["state"])) for r in page],
            next_cursor=str(page[-1]["first_seq"]) if more and page else None,
        )
