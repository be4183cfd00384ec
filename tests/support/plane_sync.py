"""Helpers of the plane-sync tests: read what plane-sync published, drive a run's lifecycle."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from nexus_events.contract import subjects
from nexus_events.contract.codec import Decoded
from nexus_events.contract.streams import INBOX, PLANE, RUNS, TASKS
from nexus_events.events import (
    ApprovalRequested,
    Event,
    RunCompleted,
    RunResult,
    RunStarted,
    RunTurn,
    TaskCreated,
)
from nexus_events.transport.bus import Bus


async def events(bus: Bus, stream: str, filter_subject: str | None = None) -> list[Decoded]:
    return [d async for d in bus.replay(stream, filter_subject=filter_subject)]


async def run_events(bus: Bus, name: str | None = None) -> list[Decoded]:
    return await events(bus, RUNS, subjects.run_events_filter(event=name))


async def task_events(bus: Bus) -> list[Decoded]:
    return await events(bus, TASKS)


async def inbox(bus: Bus, run_id: str) -> list[Event]:
    return [d.event for d in await events(bus, INBOX, subjects.inbox(run_id))]


async def plane_events(bus: Bus, name: str) -> list[Any]:
    return [d.event for d in await events(bus, PLANE, subjects.plane_events_filter(event=name))]


async def publish_run(bus: Bus, run_id: str, name: str, event: Event) -> None:
    await bus.publish(subjects.run_event(run_id, name), event, msg_id=f"t:{run_id}:{name}")


async def start_run(bus: Bus, run_id: str) -> None:
    await publish_run(bus, run_id, "started", RunStarted(runner="test"))


async def ask_approval(bus: Bus, run_id: str, approval_id: str) -> None:
    await publish_run(
        bus,
        run_id,
        "approval_requested",
        ApprovalRequested(
            approval_id=approval_id,
            tool="shell",
            summary="rm -rf build/",
            why="destructive",
            expires_at=datetime.now(UTC) + timedelta(minutes=5),
        ),
    )


async def turn(bus: Bus, run_id: str, n: int) -> None:
    await bus.publish(subjects.run_event(run_id, "turn"), RunTurn(turn=n), msg_id=f"t:{run_id}:{n}")


async def complete(bus: Bus, run_id: str) -> None:
    await publish_run(
        bus,
        run_id,
        "completed",
        RunCompleted(
            result=RunResult(
                summary="Fixed the failing test.",
                pr_url="https://git.example/pr/7",
                diff_stat=" src/app.py | 2 +-\n 1 file changed",
            )
        ),
    )


async def create_task(bus: Bus, task_id: str, title: str, **extra: Any) -> None:
    await bus.publish(
        subjects.task_event(task_id, "created"),
        TaskCreated(title=title, **extra),
        msg_id=f"t:task:{task_id}",
    )


MakeSync = Callable[..., Awaitable[Any]]  # conftest's make_sync: start a PlaneSyncApp


async def nexus_cli(nats_url: str, *args: str) -> Any:
    """Run the `nexus` CLI (typer's CliRunner) against `nats_url`; its `Result`."""
    from tests.support.cli import invoke  # the CLI is only needed by the tests that use it

    return await asyncio.to_thread(invoke, {}, "--nats-url", nats_url, *args)
