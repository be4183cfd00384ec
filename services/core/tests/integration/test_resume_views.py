"""What core's queries show of a resumed run (issue 24), folded from NEXUS_RUNS into PostgreSQL."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from nexus_events.contract import subjects
from nexus_events.contract.streams import RUNS, TASKS
from nexus_events.events import (
    ApprovalRequested,
    Condensation,
    ModelSpec,
    ResumePolicy,
    RunCondensed,
    RunConfig,
    RunDispatched,
    RunPrepared,
    RunResumed,
    RunResuming,
    RunStarted,
)
from nexus_events.transport.bus import Bus, Outgoing

from nexus_core.app import CoreApp

from .support import query


async def _run(core: CoreApp, bus: Bus, run_id: str, events: list[tuple[str, object]]) -> dict:
    await bus.publish_many([Outgoing(subjects.run_event(run_id, n), e) for n, e in events])  # type: ignore[arg-type]
    assert core.views_runner is not None
    for stream in (RUNS, TASKS):
        end = (await bus.js.stream_info(stream)).state.last_seq
        await core.views_runner.wait_until(stream, end)
    error, view = await query(bus, subjects.CORE_RUNS_GET, {"run_id": run_id})
    assert error is None, view
    return view  # type: ignore[no-any-return]


def _condensed(turn: int, strategy: str) -> RunCondensed:
    return RunCondensed(
        turn=turn,
        tokens_before=9000,
        tokens_after=3000,
        budget=8000,
        counter="estimate",
        condensation=Condensation(strategy=strategy),  # type: ignore[arg-type]
    )


async def test_attempt_status_and_condensations_of_a_resumed_run(bus: Bus, core: CoreApp):
    expires = datetime.now(UTC) + timedelta(hours=1)
    config = RunConfig(
        run_id="res1",
        agent_id="a",
        task_id="T-res",
        system_prompt="p",
        model=ModelSpec(name="m"),
        resume=ResumePolicy(max_attempts=3),
    )
    view = await _run(core, bus, "res1", [
        ("prepared", RunPrepared(config=config)),
        ("dispatched", RunDispatched(runtime="local", handle="1")),
        ("started", RunStarted(runner="host")),
        ("approval_requested", ApprovalRequested(
            approval_id="a1", tool="git_push", summary="push", expires_at=expires)),
        ("resuming", RunResuming(attempt=2, reason="runtime_gone")),
    ])  # fmt: skip
    # The scheduler's `resuming` moves the attempt on and leaves the status alone.
    assert (view["attempt"], view["status"], view["condensations"]) == (2, "awaiting_approval", 0)

    view = await _run(core, bus, "res1", [
        ("dispatched", RunDispatched(runtime="local", handle="2", attempt=2)),
        ("resumed", RunResumed(attempt=2, turns=7, messages=15, entries=16)),
        ("condensed", _condensed(8, "elide")),
        ("condensed", _condensed(8, "summarise")),
        ("condensed", _condensed(8, "elide")),  # published again: counted once
    ])  # fmt: skip
    assert (view["attempt"], view["status"], view["condensations"]) == (2, "running", 2)
    assert (view["runtime_handle"], view["max_attempts"]) == ("2", 3)

    # The board card of the task shows the attempt of its run.
    error, board = await query(bus, subjects.CORE_BOARD_GET)
    assert error is None, board
    [task] = [t for t in board["tasks"] if t["task_id"] == "T-res"]
    assert task["current_run"] == {"run_id": "res1", "status": "running", "attempt": 2}
