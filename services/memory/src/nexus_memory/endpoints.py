"""The `nexus-memory` nats.micro service: search, record, forget, list, consolidate, rebuild.

Bodies are the contract's models (`nexus_events.events.memory`); answers and errors follow
`nexus_events.transport.micro` like core's queries (400 names the field, 404, 422 for a blocked
secret, 500 logged).
"""

from __future__ import annotations

import functools
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

import asyncpg
from nats.micro.service import Service
from nexus_events.contract import subjects
from nexus_events.events import (
    MemoryConsolidateReply,
    MemoryConsolidateRequest,
    MemoryForgetRequest,
    MemoryListReply,
    MemoryListRequest,
    MemoryRebuildReply,
    MemoryRebuildRequest,
    MemoryRecordReply,
    MemoryRecordRequest,
    MemorySearchReply,
    MemorySearchRequest,
    MemoryView,
)
from nexus_events.transport import micro
from nexus_events.transport.bus import Bus
from nexus_events.transport.micro import Handler, QueryError
from nexus_events.transport.projection import quote_ident

from nexus_memory.metrics import MemoryMetrics
from nexus_memory.projection import MEMORY_SCHEMA
from nexus_memory.search import MemorySearch
from nexus_memory.writer import AccessTracker, MemoryWriter

SERVICE_NAME = "nexus-memory"

endpoint_handler = functools.partial(micro.endpoint_handler, service="memory")


def _status(row: asyncpg.Record) -> str:
    if row["forgotten"]:
        return "forgotten"
    if row["valid_to"] is not None:
        return "superseded"
    return "stale" if row["stale"] else "current"


def memory_view(row: asyncpg.Record) -> MemoryView:
    return MemoryView(
        memory_id=row["memory_id"],
        scope=row["scope"],
        kind=row["kind"],
        text=row["text"],
        tags=list(row["tags"]),
        key=row["key"],
        source=row["source"],
        source_run_id=row["source_run_id"],
        status=_status(row),
        superseded_by=row["superseded_by"],
        access_count=row["access_count"],
        recorded_at=row["recorded_at"].isoformat(),
        valid_to=row["valid_to"].isoformat() if row["valid_to"] else None,
    )


class MemoryEndpoints:
    def __init__(
        self,
        bus: Bus,
        pool: asyncpg.Pool[Any],
        *,
        search: MemorySearch,
        writer: MemoryWriter,
        tracker: AccessTracker,
        metrics: MemoryMetrics,
        consolidate: Callable[[list[str]], Awaitable[MemoryConsolidateReply]],
        rebuild: Callable[[], Awaitable[MemoryRebuildReply]],
        schema: str = MEMORY_SCHEMA,
    ) -> None:
        self.bus = bus
        self.pool = pool
        self._search = search
        self.writer = writer
        self.tracker = tracker
        self.metrics = metrics
        self._consolidate = consolidate
        self._rebuild = rebuild
        self.table = f"{quote_ident(schema)}.memories"
        self.service: Service | None = None

    async def start(self) -> None:
        h = endpoint_handler
        endpoints: list[tuple[str, str, Handler]] = [
            ("search", subjects.MEMORY_SEARCH, h(MemorySearchRequest, self.search)),
            ("record", subjects.MEMORY_RECORD, h(MemoryRecordRequest, self.record)),
            ("forget", subjects.MEMORY_FORGET, h(MemoryForgetRequest, self.writer.forget)),
            ("list", subjects.MEMORY_LIST, h(MemoryListRequest, self.list)),
            ("consolidate", subjects.MEMORY_CONSOLIDATE, h(MemoryConsolidateRequest, self.cons)),
            ("rebuild", subjects.MEMORY_REBUILD, h(MemoryRebuildRequest, self.rebuild)),
        ]
        self.service = await micro.start_service(
            self.bus.nc, SERVICE_NAME, "Nexus memory: hybrid search and guarded writes", endpoints
        )

    async def stop(self) -> None:
        await micro.stop_service(self.service)
        self.service = None

    async def search(self, request: MemorySearchRequest) -> MemorySearchReply:
        if not request.scopes:
            raise QueryError(
                400,
                "invalid request: scopes: name at least one scope (agent:<id>, task:<id>,"
                " repo:<name>, global)",
                [{"loc": "scopes", "msg": "name at least one scope"}],
            )
        started = time.perf_counter()
        items = await self._search.search(request, datetime.now(UTC))
        self.metrics.search(time.perf_counter() - started, strict=request.strict)
        self.tracker.note(items)
        return MemorySearchReply(items=items)

    async def record(self, request: MemoryRecordRequest) -> MemoryRecordReply:
        return await self.writer.record(request)

    async def list(self, request: MemoryListRequest) -> MemoryListReply:
        where = ["($1::text[] = '{}' OR scope = ANY($1::text[]))"]
        if not request.include_history:
            where.append("valid_to IS NULL AND NOT stale AND NOT forgotten")
        if request.cursor is not None:
            where.append("seq < $3")
        rows = await self.pool.fetch(
            f"SELECT * FROM {self.table} WHERE {' AND '.join(where)} ORDER BY seq DESC LIMIT $2",
            request.scopes,
            request.limit + 1,
            *([request.cursor] if request.cursor is not None else []),
        )
        more = len(rows) > request.limit
        rows = rows[: request.limit]
        return MemoryListReply(
            items=[memory_view(r) for r in rows],
            next_cursor=rows[-1]["seq"] if more and rows else None,
        )

    async def cons(self, request: MemoryConsolidateRequest) -> MemoryConsolidateReply:
        return await self._consolidate(request.scopes)

    async def rebuild(self, _: MemoryRebuildRequest) -> MemoryRebuildReply:
        return await self._rebuild()
