"""The flow column of `nexus board`: the newest flow run of each task, from the flows service
(`nexus.flows.v1.list` by task). The board is core's; without the flows service it still
prints, with a note instead of flows."""

from __future__ import annotations

import asyncio
from typing import Any

from nexus_events.contract import subjects

from nexus_cli.client import Session
from nexus_cli.errors import CliError, ExitCode

# Requests in flight at once: a board of hundreds of tasks must not flood the service.
CONCURRENCY = 16


async def flows_by_task(s: Session, task_ids: list[str]) -> tuple[dict[str, Any], str | None]:
    """{task_id: its newest flow run (FlowRunView as JSON)} and a note when some or all could
    not be asked (the flows service absent or slow)."""
    gate = asyncio.Semaphore(CONCURRENCY)

    async def newest(task_id: str) -> dict[str, Any] | None:
        async with gate:
            reply = await s.query(
                subjects.FLOWS_LIST,
                {"task_id": task_id, "limit": 1},
                service="the flows service",
            )
        flows = reply.get("flows") or []
        return flows[0] if flows and isinstance(flows[0], dict) else None

    if not task_ids:
        return {}, None
    # The first alone: if the service is down or stuck, the others are not asked (a board
    # of 200 tasks would otherwise wait out 200 timeouts, 16 at a time).
    first: list[Any] = await asyncio.gather(newest(task_ids[0]), return_exceptions=True)
    if isinstance(first[0], CliError) and first[0].code in (ExitCode.UNAVAILABLE, ExitCode.TIMEOUT):
        return {}, _note([first[0]], len(task_ids))
    rest = await asyncio.gather(*(newest(t) for t in task_ids[1:]), return_exceptions=True)
    results = first + rest
    found: dict[str, Any] = {}
    failures: list[CliError] = []
    for task_id, result in zip(task_ids, results, strict=True):
        if isinstance(result, CliError):
            failures.append(result)
        elif isinstance(result, BaseException):
            raise result
        elif result is not None:
            found[task_id] = result
    return found, _note(failures, len(task_ids)) if failures else None


def _note(failures: list[CliError], asked: int) -> str:
    if all(f.code is ExitCode.UNAVAILABLE for f in failures):
        return "flows: the flows service is not running (no flow column)"
    return f"flows: {failures[0].message} (for {len(failures)} of {asked} tasks)"
