"""How a run's loop task ended, mapped to the run's terminal event."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from nexus_events.contract.runstate import RunStatus
from nexus_events.errors import BusError
from nexus_events.events.runs import (
    Reason,
    RunCancelled,
    RunCompleted,
    RunFailed,
    RunResult,
    RunSleeping,
    TerminalEvent,
)

from nexus_runner.errors import RunnerError, RunStopped, ToolError
from nexus_runner.lab.replaying import ReplayStoppedError
from nexus_runner.loop import AgentLoop
from nexus_runner.plan import not_approved_message
from nexus_runner.transcript import ResumeFailedError
from nexus_runner.watchdogs import RunHandle

log = logging.getLogger(__name__)


def unrecorded(terminal: TerminalEvent, error: BusError) -> RunFailed:
    """How a run ends when some of its events could not be stored: failed, whatever it did
    (the outcome it would have had, and a completed run's result, are in the detail)."""
    detail: dict[str, Any] = {
        "outcome": terminal.event_name,
        "reason": terminal.reason,
        "message": terminal.message,
    }
    if isinstance(terminal, RunCompleted):
        detail["result"] = terminal.result.model_dump(mode="json")
    return RunFailed(
        reason=Reason.RUNNER_ERROR,
        message=f"run events could not be stored: {error}",
        detail=detail,
        tokens_in=terminal.tokens_in,
        tokens_out=terminal.tokens_out,
        cost_usd=terminal.cost_usd,
    )


def terminal_of(
    task: asyncio.Task[RunResult | RunSleeping], handle: RunHandle, loop: AgentLoop | None
) -> TerminalEvent:
    """The ending of the run whose loop task is `task` (done): completed with its result, or
    failed/cancelled with why it stopped; the loop's usage so far in every case."""
    usage = {}
    if loop is not None:
        usage = {
            "tokens_in": loop.usage.tokens_in,
            "tokens_out": loop.usage.tokens_out,
            "cost_usd": round(loop.usage.cost_usd, 6),
        }
    stopped: RunStopped | None = None
    if task.cancelled():
        stopped = handle.stop_reason or RunStopped(
            RunStatus.CANCELLED, Reason.TERMINATED, "stopped"
        )
    else:
        exc = task.exception()
        if exc is None:
            result = task.result()
            assert isinstance(result, RunResult)  # a sleep is not an ending (app.py)
            plan = loop.plan.ended if loop is not None else None
            if plan is not None:
                return RunCompleted(
                    reason=Reason.PLAN_NOT_APPROVED,
                    message=not_approved_message(plan),
                    result=result,
                    **usage,
                )
            return RunCompleted(result=result, **usage)
        if isinstance(exc, ReplayStoppedError):
            # Not a failure: the replay found what it was for (docs/lab.md); no finishing.
            result = RunResult(summary=exc.summary, turns=exc.turn - 1)
            return RunCompleted(reason=Reason.DIVERGED, message=exc.summary, result=result, **usage)
        if isinstance(exc, RunStopped):
            stopped = exc
        elif isinstance(exc, ResumeFailedError):
            stopped = RunStopped(RunStatus.FAILED, Reason.RESUME_FAILED, str(exc))
        elif isinstance(exc, (RunnerError, ToolError, OSError)):
            stopped = RunStopped(RunStatus.FAILED, Reason.RUNNER_ERROR, str(exc))
        else:
            log.error("run crashed", exc_info=exc)
            stopped = RunStopped(
                RunStatus.FAILED, Reason.RUNNER_ERROR, f"{type(exc).__name__}: {exc}"
            )
    if stopped.status == RunStatus.CANCELLED:
        by = stopped.detail.get("by")
        return RunCancelled(
            reason=stopped.reason, message=stopped.message, cancelled_by=by, **usage
        )
    return RunFailed(reason=stopped.reason, message=stopped.message, detail=stopped.detail, **usage)
