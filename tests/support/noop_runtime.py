"""A runtime that starts nothing: for the scheduler's tests and the dispatch benchmark (not a
runtime an operator can choose)."""

from __future__ import annotations

from collections.abc import AsyncIterator

from nexus_events.events import RunConfig
from nexus_scheduler.runtime.base import RunHandle, RuntimeState, RuntimeStatus


class NoopRuntime:
    """Remembers runs as running until cancelled or `finish`ed; records every call.

    A run's later attempt (`RunConfig.attempt`, a resume) replaces its earlier one; status and
    cancel of an attempt other than the current one see nothing (GONE, a no-op).
    """

    kind = "noop"

    def __init__(self) -> None:
        self.states: dict[str, RuntimeStatus] = {}
        self.attempts: dict[str, int] = {}
        self.started: list[str] = []
        self.start_calls: list[str] = []
        self.configs: list[RunConfig] = []  # of each attempt started
        self.cancelled: list[str] = []
        self.cancelled_attempts: list[tuple[str, int]] = []

    async def start(self) -> None:
        return None

    async def close(self) -> None:
        return None

    async def start_run(self, config: RunConfig) -> RunHandle:
        self.start_calls.append(config.run_id)
        if config.run_id not in self.states or config.attempt > self.attempts[config.run_id]:
            self.started.append(config.run_id)
            self.configs.append(config)
            self.attempts[config.run_id] = config.attempt
            self.states[config.run_id] = RuntimeStatus(RuntimeState.RUNNING)
        return RunHandle(self.kind, config.run_id)

    async def cancel_run(self, run_id: str, attempt: int = 1) -> None:
        self.cancelled.append(run_id)
        self.cancelled_attempts.append((run_id, attempt))
        if run_id in self.states and self.attempts[run_id] == attempt:
            self.states[run_id] = RuntimeStatus(RuntimeState.EXITED, reason="cancelled")

    def finish(self, run_id: str, status: RuntimeStatus | None = None) -> None:
        """Pretend the run's process ended (tests of lost/failed runs)."""
        self.states[run_id] = status or RuntimeStatus(RuntimeState.EXITED)
        self.attempts.setdefault(run_id, 1)

    async def stream_logs(self, run_id: str, attempt: int = 1) -> AsyncIterator[str]:
        lines: tuple[str, ...] = ()  # nothing runs, nothing is printed
        for line in lines:
            yield line

    async def status(self, run_id: str, attempt: int = 1) -> RuntimeStatus:
        if self.attempts.get(run_id, 1) != attempt:
            return RuntimeStatus(RuntimeState.GONE)
        return self.states.get(run_id, RuntimeStatus(RuntimeState.GONE))
