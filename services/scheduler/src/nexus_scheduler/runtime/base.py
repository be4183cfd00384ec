"""The `AgentRuntime` protocol: where a run executes (a Kubernetes Job, a local process, ...)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from enum import StrEnum
from typing import Protocol, runtime_checkable

from nexus_events.events import RunConfig

from nexus_scheduler.errors import SchedulerError


class RuntimeState(StrEnum):
    PENDING = "pending"  # accepted, not running yet (pod scheduling, image pull)
    RUNNING = "running"
    EXITED = "exited"  # the process/pod ended; the runner should have reported how
    FAILED = "failed"  # the platform failed the run (OOMKilled, image pull, evicted, ...)
    TIMED_OUT = "timed_out"  # the platform's own deadline (activeDeadlineSeconds) hit
    GONE = "gone"  # the runtime knows nothing of this run


LIVE_STATES = frozenset({RuntimeState.PENDING, RuntimeState.RUNNING})


@dataclass(frozen=True)
class RuntimeStatus:
    state: RuntimeState
    reason: str | None = None  # platform reason, e.g. OOMKilled, DeadlineExceeded
    message: str = ""
    exit_code: int | None = None

    @property
    def live(self) -> bool:
        return self.state in LIVE_STATES


@dataclass(frozen=True)
class RunHandle:
    """What `dispatched` records: the runtime kind and its handle (Job name, pid)."""

    runtime: str
    handle: str
    warm: bool = False  # a warm runner was handed the run (docs/warm-starts.md)


class AgentRuntimeError(SchedulerError):
    """The runtime could not start or stop a run."""


@runtime_checkable
class AgentRuntime(Protocol):
    """Starts, stops and observes runs. Implementations are idempotent per run id and
    attempt (`RunConfig.attempt`): `start_run` twice for one attempt adopts the first start;
    `cancel_run` of a finished or unknown attempt is a no-op.

    A run resumed after its runner died (issue 24) is started again with the same config but
    attempt n+1; stopping, observing and reading the logs address one attempt, so a late call
    about attempt n never touches attempt n+1.
    """

    kind: str

    async def start(self) -> None:
        """Open connections / start watches."""

    async def close(self) -> None:
        """Release resources (runs keep going)."""

    async def start_run(self, config: RunConfig) -> RunHandle:
        """Start the run's attempt `config.attempt` (or adopt it if started); raise
        `AgentRuntimeError` on failure."""

    async def cancel_run(self, run_id: str, attempt: int = 1) -> None:
        """Stop the attempt now (after the cooperative grace, which the caller handles)."""

    def stream_logs(self, run_id: str, attempt: int = 1) -> AsyncIterator[str]:
        """The attempt's output lines, following until it ends."""

    async def status(self, run_id: str, attempt: int = 1) -> RuntimeStatus:
        """Where the attempt is, as far as the runtime knows."""
