"""Attempts (issue 24), pure: a lost runner is resumed until `resume.max_attempts`, the run
keeps its slot, the deadline counts from the first dispatch, a cancel wins, the fold of
`resuming` is idempotent; and the Job names of attempts."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from nexus_events.events import (
    CancelRequested,
    RunDispatched,
    RunHeartbeat,
    RunResuming,
    RunStarted,
)
from nexus_scheduler.admission import (
    AdmissionState,
    Escalate,
    Expire,
    Limits,
    Lose,
    Phase,
    Resume,
    Start,
    Timeouts,
    after_loss,
    decide,
    due,
)
from nexus_scheduler.runtime.base import RuntimeState, RuntimeStatus
from nexus_scheduler.runtime.kubernetes_jobs import ATTEMPT_LABEL, build_job, job_name
from nexus_scheduler.runtime.kubernetes_jobs import KubernetesSettings as K8s
from nexus_scheduler.service import ending_for, loss_of, msg_id

from ..factories import config, prepared

T0 = datetime(2026, 1, 1, tzinfo=UTC)
TIMEOUTS = Timeouts(cancel_grace=30, heartbeat_timeout=60, start_timeout=120)


def _at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def _running(max_attempts: int = 2, wall_seconds: int = 3600, **more: int) -> AdmissionState:
    """One run `r` dispatched at T0 and beating at T0 + 10 s, beside a queued run `q`."""
    state = AdmissionState()
    state.evolve("r", prepared("r", max_attempts=max_attempts, wall_seconds=wall_seconds), T0)
    state.evolve("q", prepared("q"), T0)
    state.begin_start("r")
    state.evolve("r", RunDispatched(runtime="noop", handle="r"), T0)
    state.evolve("r", RunStarted(), _at(10))
    return state


def test_a_lost_runner_is_resumed_until_max_attempts_then_lost() -> None:
    state = _running(max_attempts=2)
    [resume] = due(state, _at(71), TIMEOUTS)
    assert resume == Resume("r", 2, "heartbeat_missing", "no heartbeat for 60s")

    state.evolve("r", RunResuming(attempt=2, reason="heartbeat_missing"), _at(72))
    entry = state.runs["r"]
    assert (entry.phase, entry.attempt, entry.dispatched_at) == (Phase.STARTING, 2, None)
    assert entry.attempt_config().attempt == 2
    assert entry.attempt_config().model_copy(update={"attempt": 1}) == entry.config
    assert due(state, _at(500), TIMEOUTS) == []  # starting: no timer runs
    state.evolve("r", RunDispatched(runtime="noop", handle="r2", attempt=2), _at(80))
    assert (entry.phase, entry.handle, entry.dispatched_at) == (Phase.DISPATCHED, "r2", _at(80))

    # The start window begins again with the attempt's dispatch...
    assert due(state, _at(200), TIMEOUTS) == []
    [lose] = due(state, _at(201), TIMEOUTS)
    # ...and with both attempts spent, the run is lost and the message says so.
    assert isinstance(lose, Lose)
    assert lose.reason == "heartbeat_missing"
    assert lose.message == (
        "runner lost after 2 of 2 attempts: runner never started within 120s of dispatch"
    )


def test_max_attempts_one_never_resumes() -> None:
    state = _running(max_attempts=1)
    [lose] = due(state, _at(71), TIMEOUTS)
    assert lose == Lose(
        "r", "heartbeat_missing", "runner lost after 1 of 1 attempts: no heartbeat for 60s"
    )


def test_a_runtime_error_past_the_attempts_says_failed() -> None:
    state = _running(max_attempts=1)
    reason, message = loss_of(RuntimeStatus(RuntimeState.FAILED, "Evicted", "low memory"))
    decision = after_loss(state.runs["r"], reason, message)
    assert decision == Lose(
        "r", "runtime_error", "runner failed after 1 of 1 attempts: Evicted: low memory"
    )
    ended = ending_for(RuntimeStatus(RuntimeState.FAILED, "Evicted", "x"), decision.message)
    assert (ended.event_name, ended.reason, ended.message) == (  # type: ignore[attr-defined]
        "failed",
        "runtime_error",
        decision.message,
    )
    gone = RuntimeStatus(RuntimeState.EXITED, "SIGKILL", "killed by SIGKILL")
    assert loss_of(gone) == ("runtime_gone", "runtime reports SIGKILL: killed by SIGKILL")


def test_the_run_keeps_its_slot_across_attempts() -> None:
    state = _running(max_attempts=3)
    limits = Limits(global_max=1)
    assert [type(d).__name__ for d in decide(state, limits)] == ["Queue"]
    for attempt in (2, 3):
        state.evolve("r", RunResuming(attempt=attempt, reason="runtime_gone"), _at(attempt))
        assert state.active_total == 1
        assert dict(state.active_by_agent) == {"implementer": 1}
        assert "r" not in state.waiting  # never queued again
        # the queued run still waits: the resumed run's slot is not free
        assert not any(isinstance(d, Start) for d in decide(state, limits))
        state.evolve("r", RunDispatched(runtime="noop", handle="r", attempt=attempt), _at(9))
        assert state.active_total == 1


def test_the_deadline_counts_from_the_first_dispatch() -> None:
    state = _running(max_attempts=2, wall_seconds=600)
    state.evolve("r", RunResuming(attempt=2, reason="heartbeat_missing"), _at(300))
    state.evolve("r", RunDispatched(runtime="noop", handle="r", attempt=2), _at(310))
    state.evolve("r", RunStarted(), _at(320))
    state.evolve("r", RunHeartbeat(seq=1), _at(590))
    assert state.runs["r"].first_dispatched_at == T0
    assert due(state, _at(599), TIMEOUTS) == []
    assert due(state, _at(600), TIMEOUTS) == [Expire("r", 600)]


def test_a_cancel_wins_over_a_new_attempt() -> None:
    state = _running(max_attempts=3)
    state.evolve("r", CancelRequested(requested_by="ops"), _at(20))
    cancel = state.runs["r"].cancel
    assert cancel is not None
    # the runner went silent before the cancel grace ended: the run ends cancelled
    assert due(state, _at(49), TIMEOUTS) == []
    assert due(state, _at(50), TIMEOUTS) == [Escalate("r", cancel)]
    assert after_loss(state.runs["r"], "runtime_gone", "x") == Escalate("r", cancel)


def test_the_fold_of_resuming_is_idempotent_and_ignores_stale_events() -> None:
    state = _running(max_attempts=3)
    resuming = RunResuming(attempt=2, reason="runtime_gone")
    assert state.evolve("r", resuming, _at(30))
    snapshot = (state.runs["r"].phase, state.runs["r"].attempt, state.active_total)
    assert not state.evolve("r", resuming, _at(31))  # redelivered
    # the dead attempt's events, folded late, change nothing
    assert not state.evolve("r", RunHeartbeat(seq=5), _at(32))
    assert not state.evolve("r", RunStarted(), _at(32))
    assert not state.evolve("r", RunDispatched(runtime="noop", handle="r"), _at(33))
    assert (state.runs["r"].phase, state.runs["r"].attempt, state.active_total) == snapshot
    assert state.pending_attempts() == ["r"]

    assert state.evolve("r", RunDispatched(runtime="noop", handle="r", attempt=2), _at(40))
    assert not state.evolve("r", RunDispatched(runtime="noop", handle="r", attempt=2), _at(41))
    assert state.pending_attempts() == []
    # a beat stamped before this attempt's dispatch (the last beat a rebuild reads) is old
    assert not state.evolve("r", RunHeartbeat(seq=6), _at(39))
    assert state.runs["r"].phase is Phase.DISPATCHED
    assert state.evolve("r", RunStarted(), _at(45))
    assert state.runs["r"].phase is Phase.RUNNING
    assert not state.evolve("r", resuming, _at(50))  # an older attempt's resuming


def test_a_runner_quicker_than_its_dispatch_still_gets_its_timers() -> None:
    state = AdmissionState()
    state.evolve("r", prepared("r", wall_seconds=100), T0)
    state.begin_start("r")
    state.evolve("r", RunStarted(), _at(1))  # before the scheduler's own `dispatched`
    state.evolve("r", RunDispatched(runtime="noop", handle="h"), _at(2))
    entry = state.runs["r"]
    assert (entry.phase, entry.handle, entry.dispatched_at) == (Phase.RUNNING, "h", _at(1))
    assert due(state, _at(101), TIMEOUTS) == [Expire("r", 100)]


def test_msg_ids_are_per_attempt() -> None:
    assert msg_id("r", "resuming", 2) == "scheduler:r:resuming:2"
    assert msg_id("r", "dispatched", 2) != msg_id("r", "dispatched", 1)


def test_job_names_of_attempts_are_distinct_labels() -> None:
    long = "run-" + "x" * 80
    for run_id in ("r-1", "R_2", long, "r-1-a2"):
        names = [job_name(run_id, n) for n in (1, 2, 3, 10)]
        assert names[0] == job_name(run_id)  # attempt 1 keeps today's name
        assert len(set(names)) == 4
        for name in names:
            assert len(name) <= 63
            assert name[0].isalnum()
            assert name[-1].isalnum()
    assert job_name("r-1", 2).endswith("-a2")
    assert job_name("r-1-a2") != job_name("r-1", 2)
    job = build_job(config("r-1").model_copy(update={"attempt": 2}), K8s())
    assert job.metadata.name == job_name("r-1", 2)
    assert job.metadata.labels[ATTEMPT_LABEL] == "2"
    assert job.spec.template.spec.volumes[0].secret.secret_name == job_name("r-1", 2)
