"""Budgets in the admission state: a paused run frees its slot, a resumed one takes it
again, and a run held by a budget before dispatch does not block the runs behind it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from nexus_events.events import (
    RunBudgetPaused,
    RunBudgetResumed,
    RunCompleted,
    RunDispatched,
    RunQueued,
    RunResuming,
    RunStarted,
)
from nexus_scheduler.admission import AdmissionState, Limits, Phase, Queue, Start, decide
from nexus_scheduler.snapshot import LifecycleFold, decode, encode

from ..factories import prepared

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def paused(turn: int = 1) -> RunBudgetPaused:
    return RunBudgetPaused(
        budget_id="alpha-monthly",
        instance="team:alpha",
        bucket="2026-01",
        turn=turn,
        message="budget alpha-monthly: team:alpha month 2026-01 reached; asking team:alpha",
    )


def resumed(turn: int = 1) -> RunBudgetResumed:
    return RunBudgetResumed(budget_id="alpha-monthly", turn=turn)


def running(state: AdmissionState, run_id: str, agent: str = "a", task: str | None = None) -> None:
    state.evolve(run_id, prepared(run_id, agent_id=agent, task_id=task), T0)
    state.begin_start(run_id)
    state.evolve(run_id, RunDispatched(runtime="noop", handle=run_id), T0)
    state.evolve(run_id, RunStarted(), T0)


def slots(state: AdmissionState) -> tuple[int, int, int]:
    """Slots taken: in all, by agent a, by task T-1."""
    return state.active_total, state.active_by_agent["a"], state.active_by_task["T-1"]


def starts(state: AdmissionState, limits: Limits, now: datetime | None = None) -> list[str]:
    return [d.run_id for d in decide(state, limits, now) if isinstance(d, Start)]


def test_a_paused_run_frees_its_slot_and_a_resumed_one_takes_it_again() -> None:
    state = AdmissionState()
    running(state, "r1", agent="a", task="T-1")
    state.evolve("r2", prepared("r2", agent_id="a", task_id="T-1"), T0)
    limits = Limits(global_max=1, agent_default=1, task_max=1)
    assert starts(state, limits) == []

    assert state.evolve("r1", paused(), T0)
    assert (state.active_total, state.active_by_agent["a"], state.active_by_task["T-1"]) == (
        0,
        0,
        0,
    )
    assert starts(state, limits) == ["r2"]  # every limit has room again
    assert not state.evolve("r1", paused(), T0)  # a duplicate changes nothing
    assert state.active_total == 0

    assert state.evolve("r1", resumed(), T0)
    assert (state.active_total, state.active_by_agent["a"], state.active_by_task["T-1"]) == (
        1,
        1,
        1,
    )
    assert starts(state, limits) == []
    assert not state.evolve("r1", resumed(), T0)
    assert state.active_total == 1


def test_a_run_ending_while_paused_frees_nothing_twice() -> None:
    state = AdmissionState()
    running(state, "r1")
    running(state, "r2")
    state.evolve("r1", paused(), T0)
    state.evolve("r1", RunCompleted(), T0)
    assert state.active_total == 1
    assert dict(state.active_by_agent) == {"a": 1}


def test_an_older_turns_budget_event_folded_late_changes_nothing() -> None:
    state = AdmissionState()
    running(state, "r1")
    state.evolve("r1", paused(turn=3), T0)
    state.evolve("r1", resumed(turn=3), T0)
    assert not state.evolve("r1", paused(turn=2), T0)  # a redelivery of an earlier pause
    assert state.active_total == 1
    assert state.evolve("r1", paused(turn=5), T0)
    assert state.active_total == 0


def test_a_new_attempt_of_a_paused_run_takes_its_slot() -> None:
    state = AdmissionState()
    running(state, "r1")
    state.evolve("r1", paused(), T0)
    state.evolve("r1", RunResuming(attempt=2, reason="heartbeat_missing", message="gone"), T0)
    assert state.active_total == 1
    assert not state.runs["r1"].budget_paused


def test_a_run_held_by_a_budget_does_not_block_the_runs_behind_it() -> None:
    state = AdmissionState()
    for rid in ("r1", "r2", "r3"):
        state.evolve(rid, prepared(rid, agent_id="a"), T0)
    limits = Limits(global_max=1)
    assert starts(state, limits, T0) == ["r1"]
    state.begin_start("r1")
    # The spend service says wait: r1 gives the slot back, in its place in the queue.
    recheck = T0 + timedelta(seconds=5)
    assert state.hold_for_budget("r1", recheck)
    assert state.active_total == 0
    assert state.queue() == ["r1", "r2", "r3"]
    assert state.position("r1") == 1
    decisions = decide(state, limits, T0)
    assert [(type(d).__name__, d.run_id) for d in decisions] == [("Start", "r2"), ("Queue", "r3")]
    queued = decisions[1]
    assert isinstance(queued, Queue)
    assert queued.event.position == 2  # r1 still waits ahead of it
    # Once its recheck time passes it is a candidate again, ahead of the rest.
    assert starts(state, Limits(global_max=None), recheck) == ["r1", "r2", "r3"]


def test_a_runs_ending_asks_the_held_again_before_their_recheck() -> None:
    state = AdmissionState()
    running(state, "r0")
    state.evolve("r1", prepared("r1"), T0)
    state.begin_start("r1")
    state.hold_for_budget("r1", T0 + timedelta(hours=1))
    assert starts(state, Limits(global_max=None), T0) == []
    state.evolve("r0", RunCompleted(), T0)  # may free a budget's run limit
    assert starts(state, Limits(global_max=None), T0) == ["r1"]


def test_a_budget_extension_asks_the_held_again() -> None:
    state = AdmissionState()
    running(state, "r0")
    state.evolve("r0", paused(), T0)
    state.evolve("r1", prepared("r1"), T0)
    state.begin_start("r1")
    state.hold_for_budget("r1", T0 + timedelta(hours=1))
    assert starts(state, Limits(global_max=None), T0) == []
    state.evolve("r0", resumed(), T0)
    assert starts(state, Limits(global_max=None), T0) == ["r1"]


def test_budget_queued_records_its_reason_once() -> None:
    state = AdmissionState()
    state.evolve("r1", prepared("r1"), T0)
    state.begin_start("r1")
    state.hold_for_budget("r1", T0 + timedelta(seconds=5))
    event = RunQueued(position=1, limit="budget", waiting_for="budget b: team:alpha reached")
    assert state.evolve("r1", event, T0)
    assert state.runs["r1"].budget_wait == "budget b: team:alpha reached"
    assert state.runs["r1"].phase is Phase.QUEUED
    assert not state.evolve("r1", event, T0)


def test_a_resumed_attempt_is_never_held_for_a_budget() -> None:
    state = AdmissionState()
    running(state, "r1")
    state.evolve("r1", RunResuming(attempt=2, reason="heartbeat_missing", message="gone"), T0)
    assert not state.hold_for_budget("r1", T0)
    assert state.active_total == 1


def test_the_snapshot_carries_the_budget_pause_and_reason() -> None:
    fold = LifecycleFold()
    running(fold.state, "r1")
    running(fold.state, "r2")
    fold.state.evolve("r1", paused(turn=4), T0)
    fold.state.evolve("r3", prepared("r3"), T0)
    fold.state.begin_start("r3")
    fold.state.hold_for_budget("r3", T0 + timedelta(seconds=5))
    fold.state.evolve("r3", RunQueued(position=1, limit="budget", waiting_for="why"), T0)
    restored = LifecycleFold.from_snapshot(decode(encode(fold.snapshot(None)))).state
    assert restored.active_total == 1  # r2 only: r1 is paused
    assert restored.runs["r1"].budget_paused
    assert restored.runs["r1"].budget_turn == 4
    assert restored.runs["r3"].budget_wait == "why"
    assert restored.queue() == ["r3"]
    # The recheck time is not kept: after a takeover the held are asked again at once.
    assert starts(restored, Limits(global_max=None), T0) == ["r3"]
    restored.evolve("r1", resumed(turn=4), T0)
    assert restored.active_total == 2
