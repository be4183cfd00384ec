from __future__ import annotations

from datetime import UTC, datetime, timedelta

from nexus_events.events import (
    CancelRequested,
    RunCompleted,
    RunDispatched,
    RunHeartbeat,
    RunLost,
    RunQueued,
    RunStarted,
)
from nexus_scheduler.admission import (
    AdmissionState,
    CancelWaiting,
    Escalate,
    Expire,
    Limits,
    Lose,
    Phase,
    Queue,
    Start,
    Timeouts,
    decide,
    due,
)

from ..factories import prepared

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def _apply_decisions(state: AdmissionState, decisions: list) -> None:
    """What the service does with decisions: take slots, record queued events."""
    for d in decisions:
        if isinstance(d, Start):
            state.begin_start(d.run_id)
            state.evolve(d.run_id, RunDispatched(runtime="noop", handle=d.run_id), T0)
        elif isinstance(d, Queue):
            state.evolve(d.run_id, d.event, T0)


def test_global_limit_holds_under_200_prepared_runs_and_queue_is_fifo() -> None:
    state = AdmissionState()
    for i in range(200):
        state.evolve(f"r{i:03}", prepared(f"r{i:03}", agent_id=f"a{i % 7}"), T0)
    decisions = decide(state, Limits(global_max=10))
    starts = [d.run_id for d in decisions if isinstance(d, Start)]
    queued = [d for d in decisions if isinstance(d, Queue)]
    assert starts == [f"r{i:03}" for i in range(10)]
    assert [q.run_id for q in queued] == [f"r{i:03}" for i in range(10, 200)]
    assert [q.event.position for q in queued] == list(range(1, 191))
    assert {q.event.limit for q in queued} == {"global"}
    _apply_decisions(state, decisions)
    assert state.active_total == 10
    # queued runs are not reported twice
    assert decide(state, Limits(global_max=10)) == []

    # Finish runs one by one: each frees exactly one slot for the head of the queue.
    order: list[str] = []
    for i in range(200):
        state.evolve(f"r{i:03}", RunCompleted(), T0)
        decisions = decide(state, Limits(global_max=10))
        assert all(isinstance(d, Start) for d in decisions)
        assert state.active_total + len(decisions) <= 10
        _apply_decisions(state, decisions)
        order += [d.run_id for d in decisions]
    assert order == [f"r{i:03}" for i in range(10, 200)]
    assert state.active_total == 0
    assert not state.runs


def test_agent_limit_does_not_block_other_agents() -> None:
    state = AdmissionState()
    for rid, agent in [("a1", "x"), ("a2", "x"), ("a3", "x"), ("b1", "y")]:
        state.evolve(rid, prepared(rid, agent_id=agent), T0)
    decisions = decide(state, Limits(global_max=None, agent_default=1, per_agent={"x": 2}))
    assert [(type(d).__name__, d.run_id) for d in decisions] == [
        ("Start", "a1"),
        ("Start", "a2"),
        ("Queue", "a3"),
        ("Start", "b1"),
    ]
    q = decisions[2]
    assert isinstance(q, Queue)
    assert q.event == RunQueued(position=1, limit="agent")


def test_agent_definition_limit_and_its_precedence() -> None:
    """Per agent: settings override > the definition's max_concurrent_runs > settings default."""
    state = AdmissionState()
    for rid, agent, limit in [
        ("x1", "x", 2),
        ("x2", "x", 2),
        ("x3", "x", 2),  # the definition allows 2 although the default is 1
        ("y1", "y", None),
        ("y2", "y", None),  # no definition limit: the default (1) applies
        ("z1", "z", 1),
        ("z2", "z", 1),  # the definition says 1, the settings override says 3
    ]:
        state.evolve(rid, prepared(rid, agent_id=agent, max_concurrent_runs=limit), T0)
    limits = Limits(global_max=None, agent_default=1, per_agent={"z": 3})
    decisions = decide(state, limits)
    assert [(type(d).__name__, d.run_id) for d in decisions] == [
        ("Start", "x1"),
        ("Start", "x2"),
        ("Queue", "x3"),
        ("Start", "y1"),
        ("Queue", "y2"),
        ("Start", "z1"),
        ("Start", "z2"),
    ]
    assert {d.event.limit for d in decisions if isinstance(d, Queue)} == {"agent"}
    assert limits.agent_limit("x", 2) == 2
    assert limits.agent_limit("y", None) == 1
    assert limits.agent_limit("z", 1) == 3
    assert Limits(global_max=None).agent_limit("w", None) is None


def test_task_limit() -> None:
    state = AdmissionState()
    state.evolve("r1", prepared("r1", task_id="t1"), T0)
    state.evolve("r2", prepared("r2", task_id="t1"), T0)
    state.evolve("r3", prepared("r3", task_id="t2"), T0)
    state.evolve("r4", prepared("r4"), T0)
    decisions = decide(state, Limits(global_max=None, task_max=1))
    assert [type(d).__name__ for d in decisions] == ["Start", "Queue", "Start", "Start"]
    assert decisions[1] == Queue("r2", RunQueued(position=1, limit="task"))


def test_rebuild_from_events_is_idempotent_and_counts_dispatched_runs() -> None:
    events = [
        ("r1", prepared("r1")),
        ("r2", prepared("r2")),
        ("r3", prepared("r3")),
        ("r1", RunDispatched(runtime="local", handle="1")),
        ("r1", RunStarted()),
        ("r2", RunDispatched(runtime="local", handle="2")),
        ("r3", RunQueued(position=1, limit="global")),
        ("r2", RunCompleted()),
    ]
    once, twice = AdmissionState(), AdmissionState()
    for rid, ev in events:
        once.evolve(rid, ev, T0)
    for rid, ev in events + events:  # a replay over already-applied events changes nothing
        twice.evolve(rid, ev, T0)
    for state in (once, twice):
        assert state.active_total == 1
        assert state.runs["r1"].phase is Phase.RUNNING
        assert state.runs["r3"].phase is Phase.QUEUED
        assert state.queue() == ["r3"]
        assert set(state.finished) == {"r2"}
    assert decide(once, Limits(global_max=1)) == []
    assert decide(once, Limits(global_max=2)) == [Start("r3", once.runs["r3"].config)]


def test_terminal_is_final() -> None:
    state = AdmissionState()
    state.evolve("r1", prepared("r1"), T0)
    state.evolve("r1", RunLost(reason="heartbeat_missing"), T0)
    assert not state.evolve("r1", prepared("r1"), T0)
    assert not state.evolve("r1", RunHeartbeat(seq=3), T0)
    assert not state.evolve("r1", CancelRequested(), T0)
    assert state.runs == {}
    assert decide(state, Limits()) == []


def test_cancel_before_prepared_is_remembered() -> None:
    state = AdmissionState()
    state.evolve("r1", CancelRequested(requested_by="alice"), T0)
    state.evolve("r1", prepared("r1"), T0)
    [d] = decide(state, Limits())
    assert isinstance(d, CancelWaiting)
    assert d.cancel.requested_by == "alice"


def test_cancel_of_queued_run_leaves_queue_without_taking_a_slot() -> None:
    state = AdmissionState()
    for rid in ("r1", "r2", "r3"):
        state.evolve(rid, prepared(rid), T0)
    _apply_decisions(state, decide(state, Limits(global_max=1)))
    state.evolve("r2", CancelRequested(), T0)
    assert decide(state, Limits(global_max=1)) == [CancelWaiting("r2", state.runs["r2"].cancel)]  # type: ignore[arg-type]
    state.evolve("r2", RunCompleted(), T0)  # stands for the `cancelled` it publishes
    state.evolve("r1", RunCompleted(), T0)
    assert [d.run_id for d in decide(state, Limits(global_max=1))] == ["r3"]


def _running(state: AdmissionState, rid: str, wall: int = 600) -> None:
    state.evolve(rid, prepared(rid, wall_seconds=wall), T0)
    state.begin_start(rid)
    state.evolve(rid, RunDispatched(runtime="noop", handle=rid), T0)


def test_due_deadline_heartbeat_start_timeout_and_cancel_grace() -> None:
    timeouts = Timeouts(cancel_grace=10, heartbeat_timeout=30, start_timeout=60)
    state = AdmissionState()
    _running(state, "deadline", wall=100)
    _running(state, "silent")
    _running(state, "never-started")
    _running(state, "cancelled")
    for rid in ("deadline", "silent", "cancelled"):
        state.evolve(rid, RunStarted(), T0)
    state.evolve("deadline", RunHeartbeat(seq=1), T0 + timedelta(seconds=25))
    state.evolve("cancelled", CancelRequested(), T0 + timedelta(seconds=5))
    state.evolve("cancelled", RunHeartbeat(seq=1), T0 + timedelta(seconds=14))

    assert due(state, T0 + timedelta(seconds=14), timeouts) == []
    assert due(state, T0 + timedelta(seconds=15), timeouts) == [
        Escalate("cancelled", state.runs["cancelled"].cancel)  # type: ignore[arg-type]
    ]
    at31 = {type(d).__name__: d.run_id for d in due(state, T0 + timedelta(seconds=31), timeouts)}
    assert at31 == {"Escalate": "cancelled", "Lose": "silent"}
    state.evolve("deadline", RunHeartbeat(seq=2), T0 + timedelta(seconds=50))
    state.evolve("deadline", RunHeartbeat(seq=3), T0 + timedelta(seconds=80))
    found = due(state, T0 + timedelta(seconds=100), timeouts)
    assert Expire("deadline", 100) in found
    assert any(isinstance(d, Lose) and d.run_id == "never-started" for d in found)


def test_due_skips_runs_being_ended() -> None:
    state = AdmissionState()
    _running(state, "r1", wall=10)
    state.runs["r1"].ending = True
    assert due(state, T0 + timedelta(hours=1), Timeouts()) == []


def test_finished_runs_are_remembered_up_to_a_bound():
    from nexus_scheduler.admission import RecentlyFinished

    recent = RecentlyFinished(limit=3)
    for run_id in ("a", "b", "c", "d"):
        recent.add(run_id)
    assert len(recent) == 3
    assert "a" not in recent
    assert all(r in recent for r in ("b", "c", "d"))
    recent.add("b")  # seen again: now the most recent
    recent.add("e")
    assert "b" in recent
    assert "c" not in recent
