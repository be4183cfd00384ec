"""The run state machine: forward only, terminal states final, approvals toggle."""

from __future__ import annotations

import itertools

import pytest
from nexus_events.contract.runstate import TERMINAL, RunStatus, is_terminal, next_status
from nexus_events.contract.subjects import Family
from nexus_events.events import registered

# Every run event name of the contract (docs/design.md §3.4), plus one nobody knows.
RUN_EVENTS = sorted(name for family, name in registered() if family is Family.RUN)
EVENTS = [*RUN_EVENTS, "something_new"]
TERMINAL_EVENTS = ["completed", "failed", "cancelled", "timed_out", "lost"]
LIFECYCLE = ["requested", "prepared", "queued", "dispatched", "started"]
ORDER = [
    RunStatus.REQUESTED,
    RunStatus.PREPARED,
    RunStatus.QUEUED,
    RunStatus.DISPATCHED,
    RunStatus.RUNNING,
]


def fold(events, start=None):
    """Apply events in order, as a projection does."""
    status = start
    for name in events:
        new = next_status(status, name)
        if new is not None:
            status = new
    return status


def test_run_events_are_the_documented_ones():
    assert set(RUN_EVENTS) == {
        "requested", "prepared", "queued", "dispatched", "started", "heartbeat", "turn",
        "tool_called", "tool_result", "approval_requested", "approval_decided",
        "cancel_requested", "cancelled", "completed", "failed", "timed_out", "lost",
        # issue 30: the audit record of an answer the approver policy refused.
        "approval_refused",
        # issue 24: resume after runner loss, checkpoints and context condensation.
        "resuming", "resumed", "checkpointed", "condensed",
        # issue 40: a run paused on a reached budget, and going on.
        "budget_paused", "budget_resumed",
        # issue 35: a network request of the tools through the runner's egress proxy.
        "egress",
        # issue 35: an MCP server that could not start.
        "mcp_server_unavailable",
        # issue 39: the lab's replay divergence and golden runs.
        "diverged", "golden_marked",
        # issue 42: a run that slept, and a wake asked of it.
        "sleeping", "wake_requested",
    }  # fmt: skip


def test_a_sleeping_run_holds_its_rank_and_runs_again_when_its_next_attempt_resumes():
    asleep = [*LIFECYCLE, "sleeping"]
    assert fold(asleep) == RunStatus.SLEEPING
    # A late heartbeat or turn of the attempt that slept does not wake it; nor does the
    # wake asked or the scheduler's `resuming`: the woken attempt's `resumed` does.
    assert fold([*asleep, "heartbeat", "turn", "wake_requested", "resuming"]) == RunStatus.SLEEPING
    assert fold([*asleep, "resuming", "dispatched", "resumed"]) == RunStatus.RUNNING
    assert fold([*asleep, "timed_out"]) == RunStatus.TIMED_OUT
    assert fold([*LIFECYCLE, "completed", "sleeping"]) == RunStatus.COMPLETED


def test_a_resumed_attempt_runs_whatever_the_dead_one_waited_for():
    waiting = [*LIFECYCLE, "approval_requested"]
    assert fold([*waiting, "resuming"]) == RunStatus.AWAITING_APPROVAL
    assert fold([*waiting, "resuming", "resumed"]) == RunStatus.RUNNING
    assert fold([*LIFECYCLE, "resuming", "resumed", "condensed"]) == RunStatus.RUNNING
    assert fold([*LIFECYCLE, "lost", "resuming", "resumed"]) == RunStatus.LOST


def test_a_refused_answer_leaves_the_run_waiting():
    assert fold([*LIFECYCLE, "approval_requested", "approval_refused"]) == (
        RunStatus.AWAITING_APPROVAL
    )


def test_happy_path():
    assert fold([*LIFECYCLE, "heartbeat", "turn", "tool_called", "tool_result", "completed"]) == (
        RunStatus.COMPLETED
    )
    assert fold(LIFECYCLE) is RunStatus.RUNNING


def test_first_event_sets_status():
    assert next_status(None, "requested") is RunStatus.REQUESTED
    assert next_status(None, "turn") is RunStatus.RUNNING
    assert next_status(None, "cancel_requested") is None


@pytest.mark.parametrize(("i", "j"), [(i, j) for i in range(5) for j in range(5) if j < i])
def test_never_moves_backwards(i, j):
    assert next_status(ORDER[i], LIFECYCLE[j]) is None


@pytest.mark.parametrize(("i", "j"), [(i, j) for i in range(5) for j in range(5) if j > i])
def test_skipping_forward_is_allowed(i, j):
    assert next_status(ORDER[i], LIFECYCLE[j]) is ORDER[j]


def test_late_events_are_ignored():
    # `queued` delivered after `started` (redelivery, out-of-order publisher) changes nothing.
    assert fold(["requested", "started", "queued", "prepared", "dispatched"]) is RunStatus.RUNNING
    assert fold(["requested", "completed", "started", "heartbeat"]) is RunStatus.COMPLETED


def test_approval_toggles_between_running_and_awaiting():
    status = fold(LIFECYCLE)
    status = next_status(status, "approval_requested")
    assert status is RunStatus.AWAITING_APPROVAL
    # a heartbeat or turn while waiting does not end the wait
    assert next_status(status, "heartbeat") is None
    assert next_status(status, "turn") is None
    status = next_status(status, "approval_decided")
    assert status is RunStatus.RUNNING
    assert next_status(status, "approval_decided") is None
    assert next_status(status, "approval_requested") is RunStatus.AWAITING_APPROVAL
    assert next_status(RunStatus.AWAITING_APPROVAL, "approval_requested") is None


@pytest.mark.parametrize("terminal", TERMINAL_EVENTS)
def test_terminal_event_wins_over_any_live_status(terminal):
    for status in RunStatus:
        if status in TERMINAL:
            continue
        assert next_status(status, terminal) is RunStatus(terminal)
    assert next_status(RunStatus.AWAITING_APPROVAL, terminal) is RunStatus(terminal)


def test_cancel_requested_does_not_change_status():
    for status in RunStatus:
        assert next_status(status, "cancel_requested") is None


def test_terminal_status_never_changes_exhaustive():
    """Every terminal status, followed by every ordered pair of events, stays put."""
    for status in TERMINAL:
        for first, second in itertools.product(EVENTS, repeat=2):
            assert next_status(status, first) is None, (status, first)
            assert fold([first, second], start=status) is status, (status, first, second)


def test_terminal_event_then_any_pair_of_events_is_final():
    """From any start, once a terminal event is applied, no pair of later events moves it."""
    for start in [None, *RunStatus]:
        for terminal in TERMINAL_EVENTS:
            reached = fold([terminal], start=start)
            assert is_terminal(reached)
            for pair in itertools.product(EVENTS, repeat=2):
                assert fold([terminal, *pair], start=start) is reached, (start, terminal, pair)


def test_every_transition_is_forward_or_an_approval_toggle():
    rank = {status: i for i, status in enumerate(ORDER)}
    rank[RunStatus.AWAITING_APPROVAL] = rank[RunStatus.RUNNING]
    rank[RunStatus.SLEEPING] = rank[RunStatus.RUNNING]
    for status in RunStatus:
        for name in EVENTS:
            new = next_status(status, name)
            if new is None or new in TERMINAL:
                continue
            assert status not in TERMINAL
            assert rank[new] > rank[status] or (
                rank[new] == rank[status]
                and (name.startswith(("approval_", "budget_")) or name in ("resumed", "sleeping"))
                and new is not status
            ), (status, name, new)


def test_is_terminal():
    assert not is_terminal(None)
    assert is_terminal("completed")
    assert not is_terminal(RunStatus.AWAITING_APPROVAL)
    with pytest.raises(ValueError, match="bogus"):
        is_terminal("bogus")


def test_terminal_events_are_the_terminal_statuses_and_the_terminal_event_classes() -> None:
    from nexus_events.contract import runstate
    from nexus_events.events.runs import TerminalEvent

    assert set(runstate.TERMINAL_EVENTS) == {s.value for s in TERMINAL}
    assert len(runstate.TERMINAL_EVENTS) == len(set(runstate.TERMINAL_EVENTS))
    enders = {
        name for (family, name), cls in registered().items() if issubclass(cls, TerminalEvent)
    }
    assert set(runstate.TERMINAL_EVENTS) == enders
    for name in runstate.TERMINAL_EVENTS:
        assert next_status(RunStatus.RUNNING, name) == RunStatus(name)
    assert runstate.live_rank("running") == runstate.live_rank(RunStatus.AWAITING_APPROVAL)
    with pytest.raises(KeyError):
        runstate.live_rank(RunStatus.LOST)


def test_every_registered_run_event_has_a_status_and_a_name() -> None:
    """One vocabulary: each run event the contract registers is a `RunEvent`, is declared by
    its model under that name, and says which status it implies (None only for an event that
    changes no status by itself); `next_status` follows that table."""
    from nexus_events.contract import runstate
    from nexus_events.events.runs import TerminalEvent

    run_models = {name: cls for (family, name), cls in registered().items() if family is Family.RUN}
    assert set(run_models) == {e.value for e in runstate.RunEvent}
    assert set(runstate.EVENT_STATUS) == set(runstate.RunEvent)
    for name, cls in run_models.items():
        event = runstate.RunEvent(name)
        assert cls.event_name == event
        status = runstate.EVENT_STATUS[event]
        if issubclass(cls, TerminalEvent):
            assert status is not None
            assert cls.status == status
            assert status in TERMINAL
        assert next_status(None, event) == status
    # Status-less: a request (it asks, and the run's own events say what happened) and the
    # audit record of a refused answer (the approval still waits), and the scheduler's
    # `resuming` (the run is where it was until the new attempt says `resumed`), and the audit
    # record of a tools' network request, `egress` (a background process may make one while
    # the run awaits an approval), and a wake asked of a sleeping run (the scheduler's
    # `resuming` and the woken attempt's `resumed` follow).
    assert [e for e, s in runstate.EVENT_STATUS.items() if s is None] == [
        runstate.RunEvent.APPROVAL_REFUSED,
        runstate.RunEvent.CANCEL_REQUESTED,
        runstate.RunEvent.RESUMING,
        runstate.RunEvent.EGRESS,
        runstate.RunEvent.DIVERGED,
        runstate.RunEvent.GOLDEN_MARKED,
        runstate.RunEvent.WAKE_REQUESTED,
    ]
    assert set(runstate.TERMINAL_EVENTS) == {
        e for e, s in runstate.EVENT_STATUS.items() if s in TERMINAL
    }
    # Every status is reached by some event: no status without a way into it.
    assert {s for s in runstate.EVENT_STATUS.values() if s is not None} == set(RunStatus)
    assert set(RunStatus) == runstate.LIVE | TERMINAL
    assert not runstate.LIVE & TERMINAL


def test_a_condensation_applies_exactly_and_refuses_other_messages():

    from nexus_events.events.runs import Condensation

    messages = [
        {"role": "system", "content": "s"},
        {"role": "user", "content": "task"},
        {"role": "assistant", "content": None, "tool_calls": [{"id": "c1"}]},
        {"role": "tool", "tool_call_id": "c1", "content": "x" * 500},
        {"role": "assistant", "content": "done"},
    ]
    elide = Condensation(strategy="elide", elided=[3], placeholder="[elided {chars} chars]")
    elided = elide.apply(messages)
    assert elided[3] == {"role": "tool", "tool_call_id": "c1", "content": "[elided 500 chars]"}
    assert messages[3]["content"] == "x" * 500  # the input is left as it was
    summary = Condensation(strategy="summarise", start=2, end=4, summary="Earlier: read x.")
    assert summary.apply(elided) == [
        messages[0],
        messages[1],
        {"role": "user", "content": "Earlier: read x."},
        messages[4],
    ]
    with pytest.raises(ValueError, match="outside"):
        Condensation(strategy="elide", elided=[9]).apply(messages)
    with pytest.raises(ValueError, match="outside"):
        Condensation(strategy="summarise", start=3, end=9, summary="s").apply(messages)
