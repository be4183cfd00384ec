"""A runtime that starts nothing: for the scheduler's tests and the dispatch benchmark (not a
runtime an operator can choose)."""

from __future__ import annotations

from collections.abc import AsyncIterator

from nexus_events.events import RunConfig
from nexus_scheduler.runtime.base import RunHandle, RuntimeState, RuntimeStatus


class NoopRuntime:
    """Remembers runs as running until cancelled or `finish`ed; records every call."""

    kind = "noop"

    def __init__(self) -> None:
        self.states: dict[str, RuntimeStatus] = {}
        self.started: list[str] = []
        self.start_calls: list[str] = []
        self.cancelled: list[str] = []

    async def start(self) -> None:
        return None

    async def close(self) -> None:
        return None

    async def start_run(self, config: RunConfig) -> RunHandle:
        self.start_calls.append(config.run_id)
        if config.run_id not in self.states:
            self.started.append(config.run_id)
            self.states[config.run_id] = RuntimeStatus(RuntimeState.RUNNING)
        return RunHandle(self.kind, config.run_id)

    async def cancel_run(self, run_id: str) -> None:
        self.cancelled.append(run_id)
        if run_id in self.states:
            self.states[run_id] = RuntimeStatus(RuntimeState.EXITED, reason="cancelled")

    def finish(self, run_id: str, status: RuntimeStatus | None = None) -> None:
        """Pretend the run's process ended (tests of lost/failed runs)."""
        self.states[run_id] = status or RuntimeStatus(RuntimeState.EXITED)

    async def stream_logs(self, run_id: str) -> AsyncIterator[str]:
        lines: tuple[str, ...] = ()  # nothing runs, nothing is printed
        for line in lines:
            yield line

    async def status(self, run_id: str) -> RuntimeStatus:
        return self.states.get(run_id, RuntimeStatus(RuntimeState.GONE))
