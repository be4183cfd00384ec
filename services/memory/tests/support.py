"""Helpers of the memory integration tests: requests as a client sends them, table snapshots."""

from __future__ import annotations

import json
from typing import Any

import asyncpg
from nexus_events.contract import subjects
from nexus_events.transport.bus import Bus
from nexus_testing import eventually


async def ask(bus: Bus, subject: str, body: dict[str, Any], wait: float = 5.0) -> Any:
    """A request as any client sends it: JSON in, JSON out (error replies included)."""
    reply = await bus.nc.request(subject, json.dumps(body).encode(), timeout=wait)
    return json.loads(reply.data)


async def record(bus: Bus, text: str, scope: str, **extra: object) -> str:
    reply = await ask(bus, subjects.MEMORY_RECORD, {"text": text, "scope": scope, **extra})
    assert "memory_id" in reply, reply
    return str(reply["memory_id"])


async def search(bus: Bus, query: str, scopes: list[str], **extra: object) -> list[dict[str, Any]]:
    reply = await ask(bus, subjects.MEMORY_SEARCH, {"query": query, "scopes": scopes, **extra})
    assert "items" in reply, reply
    return list(reply["items"])


async def until_found(
    bus: Bus, query: str, scopes: list[str], memory_id: str, **extra: object
) -> list[dict[str, Any]]:
    async def found() -> list[dict[str, Any]] | None:
        items = await search(bus, query, scopes, **extra)
        return items if any(i["memory_id"] == memory_id for i in items) else None

    result: list[dict[str, Any]] = await eventually(found, what=f"{memory_id} found")
    return result


async def rows(pool: asyncpg.Pool[Any], table: str = "memory.memories") -> list[dict[str, Any]]:
    """Every row of a memory table, comparable (vectors as pgvector's text, or lists)."""
    key = "run_id" if table.endswith("extractions") else "memory_id"
    if table.endswith("consolidations"):
        key = "pass_id"
    out = []
    for r in await pool.fetch(f"SELECT * FROM {table} ORDER BY {key}"):
        row = dict(r)
        if "embedding" in row and not isinstance(row["embedding"], str):
            row["embedding"] = [round(float(x), 6) for x in row["embedding"]]
        out.append(row)
    return out


async def applied(app: Any) -> None:
    """Wait until the projection has applied everything NEXUS_MEMORY holds now."""
    info = await app.bus.js.stream_info("NEXUS_MEMORY")
    await app.runner.wait_until("NEXUS_MEMORY", info.state.last_seq, within=15)
