"""``nexus.lab.v1.evals.get|list`` from the lab's projection, as the `nexus-lab` nats.micro
service (validation, error replies and 500s as every Nexus micro service)."""

from __future__ import annotations

import functools
from typing import Any

import asyncpg
from nats.micro.service import Service
from nexus_events.contract import subjects
from nexus_events.events.evals import EvalGetRequest, EvalListReply, EvalListRequest, EvalReport
from nexus_events.transport import micro
from nexus_events.transport.micro import Handler, QueryError
from nexus_events.transport.projection import quote_ident

from nexus_lab.report import report
from nexus_lab.state import EvalState
from nexus_lab.store import SCHEMA

SERVICE_NAME = "nexus-lab"
endpoint_handler = functools.partial(micro.endpoint_handler, service="lab")


class LabQueries:
    def __init__(self, nc: Any, pool: asyncpg.Pool[Any], schema: str = SCHEMA) -> None:
        self.nc = nc
        self.pool = pool
        self.q = quote_ident(schema)
        self.service: Service | None = None

    async def start(self) -> None:
        h = endpoint_handler
        endpoints: list[tuple[str, str, Handler]] = [
            ("get", subjects.LAB_EVALS_GET, h(EvalGetRequest, self.get)),
            ("list", subjects.LAB_EVALS_LIST, h(EvalListRequest, self.list)),
        ]
        self.service = await micro.start_service(
            self.nc, SERVICE_NAME, "Nexus lab: eval runs", endpoints
        )

    async def stop(self) -> None:
        await micro.stop_service(self.service)
        self.service = None

    async def get(self, query: EvalGetRequest) -> EvalReport:
        raw = await self.pool.fetchval(
            f"SELECT state FROM {self.q}.eval_runs WHERE eval_run_id = $1", query.eval_run_id
        )
        if raw is None:
            raise QueryError(404, f"no eval run {query.eval_run_id!r}")
        return report(EvalState.load(raw))

    async def list(self, query: EvalListRequest) -> EvalListReply:
        args: list[object] = []
        where = ""
        if query.suite is not None:
            args.append(query.suite)
            where = " WHERE suite = $1"
        args.append(query.limit)
        rows = await self.pool.fetch(
            f"SELECT state FROM {self.q}.eval_runs{where}"
            f" ORDER BY first_seq DESC LIMIT ${len(args)}",
            *args,
        )
        return EvalListReply(evals=[report(EvalState.load(r["state"])) for r in rows])
