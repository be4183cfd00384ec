"""What runs beside a run's loop: heartbeats, and the watchdogs that stop it from outside."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from nexus_events.contract.runstate import RunStatus
from nexus_events.events.runs import Reason, RunHeartbeat, RunResult, RunSleeping
from nexus_events.runtime.clock import SleepingClock

from nexus_runner.control import RunControl
from nexus_runner.errors import RunnerError, RunStopped
from nexus_runner.loop import AgentLoop


@dataclass
class RunHandle:
    """Ways to stop a running run from outside (signal handlers, tests)."""

    stop_reason: RunStopped | None = None
    task: asyncio.Task[RunResult | RunSleeping] | None = None
    control: RunControl | None = None

    def stop(self, reason: RunStopped) -> None:
        if self.stop_reason is None:
            self.stop_reason = reason
        if self.task is not None:
            self.task.cancel()

    def terminate(self) -> None:
        self.stop(RunStopped(RunStatus.CANCELLED, Reason.TERMINATED, "the runner received SIGTERM"))


async def heartbeats(
    publish: Callable[[RunHeartbeat], Awaitable[None]],
    interval: float,
    loop_ref: list[AgentLoop | None],
    done: asyncio.Event,
    clock: SleepingClock,
) -> None:
    """A heartbeat every `interval` seconds saying the turn and phase the loop is at."""
    # `done` as well as cancellation: on Python 3.11 a cancel that lands while nats-py's
    # publish (asyncio.wait_for) is completing can be swallowed, and the loop would go on.
    seq = 0
    while not done.is_set():
        await clock.sleep(interval)
        if done.is_set():
            return
        seq += 1
        current = loop_ref[0]
        turn = current.usage.turns if current else 0
        phase = current.phase if current else "preparing"
        with contextlib.suppress(RunnerError, OSError):
            await publish(RunHeartbeat(seq=seq, turn=turn, phase=phase))


async def watch_cancel(control: RunControl, handle: RunHandle) -> None:
    """Stop the run, cancelled, once someone asks to cancel it."""
    await control.cancelled.wait()
    cancel = control.cancel
    assert cancel is not None
    handle.stop(
        RunStopped(
            RunStatus.CANCELLED, cancel.reason, "cancel requested", {"by": cancel.requested_by}
        )
    )


async def watch_ended(control: RunControl, handle: RunHandle, quiet: asyncio.Event) -> None:
    """Stop the run once it was ended elsewhere or a newer attempt took it over; `quiet` is
    set at once, so no heartbeat follows the ending in the run's name."""
    await control.ended_elsewhere.wait()
    quiet.set()
    if (newer := control.superseded) is not None:
        message = f"superseded by attempt {newer.attempt} of the run"
        handle.stop(RunStopped(RunStatus.FAILED, newer.reason, message))
        return
    ended = control.ended
    assert ended is not None
    handle.stop(
        RunStopped(RunStatus.FAILED, ended.reason, f"the run was already ended {ended.event_name}")
    )


async def wall_clock(
    remaining: float, seconds: float, handle: RunHandle, clock: SleepingClock
) -> None:
    """Stop the run, failed budget_exceeded, once the `remaining` wall-clock seconds are spent
    (`seconds` is the budget's limit, which the ending names)."""
    await clock.sleep(max(remaining, 0.0))
    handle.stop(
        RunStopped(
            RunStatus.FAILED,
            Reason.BUDGET_EXCEEDED,
            f"budget max_wall_seconds exceeded (limit {seconds:g})",
            {"budget": "max_wall_seconds", "limit": seconds},
        )
    )
