"""Randomised NEXUS_RUNS histories for the rebuild/snapshot equality tests, and what of an
`AdmissionState` two rebuilds must agree on."""

from __future__ import annotations

import random
from typing import Any

from nexus_events.events import (
    CancelRequested,
    Event,
    RunCancelled,
    RunCompleted,
    RunDispatched,
    RunFailed,
    RunHeartbeat,
    RunLost,
    RunQueued,
    RunResuming,
    RunStarted,
    RunTimedOut,
    RunTurn,
)
from nexus_scheduler.admission import AdmissionState

from .factories import prepared

AGENTS = ("implementer", "reviewer", "planner")
TASKS = (None, "task-1", "task-2")


def _ending(rng: random.Random) -> Event:
    return rng.choice(
        [
            RunCompleted(),
            RunFailed(reason="runtime_error", message="boom"),
            RunCancelled(reason="user_requested"),
            RunTimedOut(limit_seconds=60),
            RunLost(reason="heartbeat_missing"),
        ]
    )


def _run_events(rng: random.Random, run_id: str) -> list[Event]:
    """One run's events in its own order: a random way through the lifecycle."""
    events: list[Event] = []
    if rng.random() < 0.1:
        events.append(CancelRequested(requested_by="early"))  # before its `prepared`
    if rng.random() < 0.05:
        return [*events, RunDispatched(runtime="noop", handle=run_id)]  # never prepared
    events.append(prepared(run_id, rng.choice(AGENTS), rng.choice(TASKS)))
    if rng.random() < 0.3:
        events.append(RunQueued(position=rng.randint(1, 5), limit="global"))
    if rng.random() < 0.7:
        if rng.random() < 0.1:
            events.append(RunHeartbeat(seq=0))  # the runner beat before `dispatched` landed
        events.append(RunDispatched(runtime="noop", handle=run_id))
        if rng.random() < 0.8:
            events.append(RunStarted(runner="test"))
            events += [RunHeartbeat(seq=i) for i in range(rng.randint(0, 6))]
            if rng.random() < 0.2:
                events.append(RunTurn(turn=1))  # not watched
        for attempt in (2, 3):  # the runner lost, the run resumed
            if rng.random() < 0.25:
                events.append(RunResuming(attempt=attempt, reason="heartbeat_missing"))
                if rng.random() < 0.1:
                    events.append(RunHeartbeat(seq=7))  # the dead attempt's, folded late
                if rng.random() < 0.8:  # else the scheduler died before the start
                    events.append(RunDispatched(runtime="noop", handle=run_id, attempt=attempt))
                    if rng.random() < 0.1:
                        events.append(RunDispatched(runtime="noop", handle=run_id))  # stale
                    if rng.random() < 0.7:
                        events.append(RunStarted(runner="test"))
    if rng.random() < 0.2:
        events.append(CancelRequested(requested_by="ops"))
    if rng.random() < 0.6:
        events.append(_ending(rng))
        if rng.random() < 0.2:
            events.append(RunHeartbeat(seq=99))  # late beat
        if rng.random() < 0.1:
            events.append(_ending(rng))  # a second ending
        if rng.random() < 0.05:
            events.append(prepared(run_id))  # a late duplicate: must not start it again
    return events


def random_history(rng: random.Random, runs: int, prefix: str = "r") -> list[tuple[str, Event]]:
    """(run_id, event) of `runs` runs, interleaved at random (each run's order kept)."""
    pending = {f"{prefix}-{i}": _run_events(rng, f"{prefix}-{i}") for i in range(runs)}
    out: list[tuple[str, Event]] = []
    while pending:
        run_id = rng.choice(sorted(pending))
        out.append((run_id, pending[run_id].pop(0)))
        if not pending[run_id]:
            del pending[run_id]
    return out


def comparable(state: AdmissionState) -> dict[str, Any]:
    """Everything admission reads from the state."""
    return {
        "runs": state.runs,
        "waiting": list(state.waiting),
        "active_total": state.active_total,
        "active_by_agent": dict(state.active_by_agent),
        "active_by_task": dict(state.active_by_task),
        "finished": list(state.finished),
        "early_cancels": state.early_cancels,
    }
