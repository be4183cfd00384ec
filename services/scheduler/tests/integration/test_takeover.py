"""Takeover reads the lifecycle of runs and the last heartbeat of the open ones, not every beat.

The history is many finished runs with many heartbeats each (what NEXUS_RUNS mostly holds
after weeks), plus open runs in every phase. The rebuilt state must equal the state folded
from every watched event (the old takeover), and the rebuild must not read the old beats.
"""

from __future__ import annotations

import logging
from typing import Any

import pytest
from nexus_events.contract import subjects
from nexus_events.contract.streams import RUNS
from nexus_events.events import (
    CancelRequested,
    Event,
    RunCompleted,
    RunDispatched,
    RunHeartbeat,
    RunLost,
    RunPrepared,
    RunQueued,
    RunStarted,
    RunTurn,
)
from nexus_events.transport.bus import Bus, Outgoing, decode_msg
from nexus_scheduler.admission import AdmissionState, Limits, Timeouts
from nexus_scheduler.rebuild import rebuild
from nexus_scheduler.service import SchedulerService, watched_subjects

from tests.support.noop_runtime import NoopRuntime

from ..factories import config
from .conftest import AppFactory

FINISHED_RUNS = 30
BEATS_PER_FINISHED_RUN = 40


def _lifecycle(run_id: str, *, task_id: str | None = None) -> list[Event]:
    return [
        RunPrepared(config=config(run_id, task_id=task_id)),
        RunDispatched(runtime="noop", handle=run_id),
        RunStarted(runner="test"),
    ]


def _beats(n: int, start: int = 0) -> list[Event]:
    return [RunHeartbeat(seq=start + i) for i in range(n)]


async def _history(bus: Bus) -> dict[str, int]:
    """Publish the history; return how many events of each kind it holds."""
    plan: list[tuple[str, Event]] = []
    for i in range(FINISHED_RUNS):
        run_id = f"old-{i}"
        events = [*_lifecycle(run_id), *_beats(BEATS_PER_FINISHED_RUN)]
        events.append(RunLost(reason="heartbeat_missing") if i % 7 == 0 else RunCompleted())
        events.append(RunHeartbeat(seq=999))  # a late beat after the end
        plan += [(run_id, e) for e in events]
    # Open runs: running with beats (one cancelled meanwhile, one on a task), dispatched only,
    # started without a beat yet, queued, and a cancel that came before its `prepared`.
    for run_id in ("live-1", "live-2", "live-3"):
        task = "task-1" if run_id == "live-3" else None
        plan += [(run_id, e) for e in [*_lifecycle(run_id, task_id=task), *_beats(5)]]
    plan.append(("live-2", CancelRequested(requested_by="ops")))
    plan += [("live-1", e) for e in _beats(3, start=5)]  # beats interleaved with other runs
    plan += [("live-2", e) for e in _beats(2, start=5)]
    plan.append(("dispatched-1", RunPrepared(config=config("dispatched-1"))))
    plan.append(("dispatched-1", RunDispatched(runtime="noop", handle="dispatched-1")))
    plan += [("started-1", e) for e in _lifecycle("started-1")]
    plan.append(("waiting-1", RunPrepared(config=config("waiting-1"))))
    plan.append(("waiting-1", RunQueued(position=1, limit="global")))
    plan.append(("early", CancelRequested()))
    plan.append(("live-1", RunTurn(turn=1)))  # not watched at all
    await bus.publish_many(
        [Outgoing(subjects.run_event(run_id, e.event_name), e) for run_id, e in plan]
    )
    counts: dict[str, int] = {}
    for _, e in plan:
        counts[e.event_name] = counts.get(e.event_name, 0) + 1
    return counts


def _service(bus: Bus) -> SchedulerService:
    return SchedulerService(bus, NoopRuntime(), limits=Limits(), timeouts=Timeouts())


def _comparable(state: AdmissionState) -> dict[str, Any]:
    return {
        "runs": state.runs,
        "waiting": list(state.waiting),
        "active_total": state.active_total,
        "active_by_agent": dict(state.active_by_agent),
        "active_by_task": dict(state.active_by_task),
        "finished": list(state.finished),
        "early_cancels": state.early_cancels,
    }


async def test_the_rebuilt_state_equals_the_fold_of_every_event(bus: Bus) -> None:
    await _history(bus)
    full = _service(bus)  # the old takeover: every watched event, heartbeats included
    async for msg in bus.replay_raw(RUNS, filter_subjects=watched_subjects()):
        full.observe(decode_msg(msg), replay=True)

    fast = _service(bus)
    rebuilt = await rebuild(bus, fast)

    assert _comparable(fast.state) == _comparable(full.state)
    # The comparison is not vacuous: the open runs are there, with their newest beat.
    running = {r: e for r, e in fast.state.runs.items() if e.phase == "running"}
    assert set(running) == {"live-1", "live-2", "live-3", "started-1"}
    beats = [
        d async for d in bus.replay(RUNS, filter_subject=subjects.run_event("live-1", "heartbeat"))
    ]
    assert len(beats) == 8
    assert fast.state.runs["live-1"].last_seen == beats[-1].envelope.timestamp
    assert rebuilt.heartbeats == 3  # live-1..3; started-1 and the others have none
    info = await bus.js.stream_info(RUNS)
    assert rebuilt.last_seq == info.state.last_seq  # the live consumer starts after it


async def test_takeover_does_not_replay_heartbeats(
    make_app: AppFactory, bus: Bus, caplog: pytest.LogCaptureFixture
) -> None:
    """Before: the leader's rebuild read every heartbeat (1,388 events here, not 138); now only the
    lifecycle events and one beat per open run."""
    counts = await _history(bus)
    caplog.set_level(logging.INFO, logger="nexus_scheduler.app")
    await make_app(max_concurrent_runs=1)

    [record] = [r for r in caplog.records if r.getMessage() == "leading: state rebuilt"]
    lifecycle = sum(n for name, n in counts.items() if name not in ("heartbeat", "turn"))
    assert record.__dict__["replayed"] == lifecycle
    assert record.__dict__["heartbeats"] == 3
    assert counts["heartbeat"] > 10 * lifecycle // 2  # the history is mostly beats
