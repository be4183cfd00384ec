"""The agent_runs row: evolve is order-independent, idempotent, and agrees with runstate."""

from __future__ import annotations

import functools
from datetime import timedelta

from hypothesis import given, settings
from hypothesis import strategies as st
from nexus_events.contract.runstate import next_status
from nexus_events.events import RunCompleted, RunPrepared, RunRequested, RunStarted
from nexus_events.events.lab import RunDiverged
from nexus_events.events.lab_specs import DivergenceKind, LabMode, LabSpec, OnDivergence

from nexus_core import run_state
from nexus_core.run_state import RunFact, RunRow, evolve

from ..run_events import LAB_CONFIG, T0, make, stream


def facts_of(names: list[str]) -> list[RunFact]:
    # Stream order: seq 1..n, timestamps increasing (JetStream timestamps follow seq).
    return [
        RunFact("r", n, i + 1, T0 + timedelta(seconds=i), make(n, i)) for i, n in enumerate(names)
    ]


def fold(facts: list[RunFact]) -> RunRow | None:
    return functools.reduce(evolve, facts, None)  # type: ignore[arg-type]


@settings(max_examples=300, deadline=None)
@given(stream, st.data())
def test_any_interleaving_with_duplicates_gives_the_in_order_row(names, data):
    facts = facts_of(names)
    expected = fold(facts)
    # Redeliveries and duplicates: every event at least once, some several times, any order.
    extra = data.draw(st.lists(st.sampled_from(facts), max_size=10))
    shuffled = data.draw(st.permutations(facts + extra))
    assert fold(list(shuffled)) == expected


@settings(max_examples=300, deadline=None)
@given(stream)
def test_in_order_status_equals_runstate_fold(names):
    status = None
    for n in names:
        status = next_status(status, n) or status
    row = fold(facts_of(names))
    assert row is not None
    assert row.status == (None if status is None else status.value)


@settings(max_examples=100, deadline=None)
@given(stream)
def test_doc_round_trip(names):
    row = fold(facts_of(names))
    assert row is not None
    assert RunRow.from_json(row.to_json()) == row


def test_a_full_run():
    row = fold(
        facts_of(
            [
                "requested",
                "prepared",
                "queued",
                "dispatched",
                "started",
                "turn",
                "turn",
                "approval_requested",
                "heartbeat",
                "approval_decided",
                "completed",
                "failed",
                "heartbeat",
            ]
        )
    )
    assert row is not None
    assert (row.status, row.reason) == ("completed", "succeeded")
    assert (row.agent_id, row.task_id, row.input) == ("a", "T", "in0")
    assert row.catalog_revisions == {"agent/a": 2}
    assert row.runtime_handle == "h3"
    assert row.attempt == 2
    assert row.phases["started"] == T0 + timedelta(seconds=4)
    assert row.ended_at == T0 + timedelta(seconds=10)
    assert row.result == {
        "summary": "done 10",
        "files_changed": [],
        "details": {},
        "commits": [],
    }
    assert row.tokens_in == 10  # the terminal event's total replaces the per-turn sums
    assert row.last_seq == 13
    assert row.turn_count == 3


def test_resume_events_set_the_attempt_status_and_condensations():
    # make(): `resuming` at i=4 names attempt 2 (no `dispatched` here does); `condensed` at
    # i=5 and i=8 are (turn 3, elide) and (turn 3, summarise), at i=11 (turn 3, elide) again.
    names = ["requested", "started", "approval_requested", "heartbeat"]
    row = fold(facts_of([*names, "resuming"]))
    assert row is not None
    # `resuming` keeps the status: the run waits as it did until the new attempt says so.
    assert (row.status, row.attempt) == ("awaiting_approval", 2)
    row = fold(
        facts_of(
            [*names, "resuming", "condensed", "resumed", "checkpointed", "condensed", "turn",
             "heartbeat", "condensed"]
        )
    )  # fmt: skip
    assert row is not None
    assert (row.status, row.attempt) == ("running", 2)  # `resumed` ends the dead approval wait
    assert row.condensations == 2
    assert RunRow.from_json(row.to_json()) == row


def test_a_sleeping_run_shows_its_wake_time_until_the_woken_attempt_resumes():
    names = ["requested", "prepared", "dispatched", "started", "heartbeat"]
    asleep = facts_of([*names, "sleeping", "heartbeat", "wake_requested", "resuming"])
    for order in (asleep, asleep[::-1]):
        row = fold(order)
        assert row is not None
        assert row.status == "sleeping"
        assert row.sleeping_until == T0 + timedelta(minutes=10)  # make("sleeping", 5)
        assert row.sleep_reason == "wait 5"
    woken = facts_of([*names, "sleeping", "resuming", "dispatched", "started", "resumed"])
    row = fold(woken[::-1])
    assert row is not None
    assert (row.status, row.sleeping_until, row.sleep_reason) == ("running", None, None)
    assert RunRow.from_json(row.to_json()) == row


def test_late_events_never_move_a_run_backwards():
    facts = facts_of(["requested", "started", "approval_requested", "heartbeat", "queued"])
    row = fold(facts)
    assert row is not None
    assert row.status == "awaiting_approval"
    row = fold(facts_of(["requested", "cancelled", "started", "completed"]))
    assert row is not None
    assert (row.status, row.reason) == ("cancelled", "user_requested")


@settings(max_examples=200, deadline=None)
@given(stream, st.integers(min_value=0, max_value=24))
def test_in_place_fold_equals_evolve_and_evolve_leaves_its_input_alone(names, cut):
    facts = facts_of(names)
    in_place = RunRow(run_id="r")
    for fact in facts:
        run_state.fold(in_place, fact)
    assert in_place == fold(facts)

    before = fold(facts[: max(cut % len(facts), 1)])
    assert before is not None
    snapshot = RunRow.from_json(before.to_json())
    for fact in facts:
        evolve(before, fact)
    assert before == snapshot


def test_a_row_stored_by_the_previous_version_still_loads():
    # `doc` as written before rows were serialized by pydantic: isoformat "+00:00" offsets,
    # string keys for turns, lists for tuples.
    old = (
        '{"run_id": "r", "status": "completed", "status_key": [2, 0, 0, -9], "reason":'
        ' "succeeded", "message": null, "ended_at": "2026-01-01T00:00:09+00:00", "agent_id":'
        ' "a", "task_id": "T", "origin": "cli", "input": "in0", "requested_by": null,'
        ' "parent_run_id": null, "info_key": [0, 1], "catalog_revisions": {"agent/a": 2},'
        ' "config_seq": 2, "attempt": 1, "runtime": "local", "runtime_handle": "h3",'
        ' "dispatch_seq": 4, "queue_position": null, "queue_seq": null, "phases": {"requested":'
        ' "2026-01-01T00:00:00+00:00", "started": "2026-01-01T00:00:04+00:00"},'
        ' "last_event_at": "2026-01-01T00:00:09+00:00", "turns": {"1": [10, 5, 0.01]},'
        ' "final_totals": null, "result": {"summary": "done"}, "first_seq": 1, "last_seq": 9}'
    )
    row = RunRow.from_json(old)
    assert row.status_key == (2, 0, 0, -9)
    assert row.turns == {1: (10, 5, 0.01)}
    assert row.phases["started"] == T0 + timedelta(seconds=4)
    assert row.ended_at == T0 + timedelta(seconds=9)
    assert row.catalog_revisions == {"agent/a": 2}
    assert (row.tokens_in, row.tokens_out, row.cost_usd) == (10, 5, 0.01)
    assert RunRow.from_json(row.to_json()) == row


def test_golden_counts_only_a_mark_after_the_end_in_any_order():
    # make("golden_marked", i) marks golden unless i % 3 == 0 (then it takes the mark back).
    live_mark = facts_of(["requested", "golden_marked", "completed"])  # marked at seq 2 (i=1)
    for order in (live_mark, live_mark[::-1]):
        row = fold(order)
        assert row is not None
        assert row.golden is False
    after = facts_of(["requested", "completed", "golden_marked"])  # seq 3 (i=2): golden
    for order in (after, after[::-1], [after[2], after[0], after[1]]):
        row = fold(order)
        assert row is not None
        assert row.golden is True
    taken_back = facts_of(["requested", "completed", "golden_marked", "golden_marked"])  # i=3
    row = fold(taken_back[::-1])
    assert row is not None
    assert row.golden is False


def test_lab_fields_come_from_the_request_config_started_and_first_divergence():
    lab = LabSpec(mode=LabMode.FORK, source_run_id="src", at_turn=2)
    events = [
        RunRequested(agent_id="a", lab=lab),  # no repo: the config's is the source's
        RunPrepared(config=LAB_CONFIG),
        RunStarted(base_commit="b0"),
        RunStarted(base_commit="b1"),  # a resumed attempt: the first start is the base
        RunDiverged(turn=2, kind=DivergenceKind.TOOLS, detail="t", action=OnDivergence.LIVE),
        RunDiverged(turn=3, kind=DivergenceKind.MESSAGE, detail="m", action=OnDivergence.LIVE),
        RunCompleted(),
    ]
    facts = [
        RunFact("r", e.event_name, i + 1, T0 + timedelta(seconds=i), e)
        for i, e in enumerate(events)
    ]
    for order in (facts, facts[::-1], facts[3:] + facts[:3]):
        row = fold(order)
        assert row is not None
        assert (row.lab_mode, row.lab_source) == ("fork", "src")
        assert row.lab == lab.model_dump(mode="json")
        assert row.repo == {"url": "/src/lab", "ref": "c0", "branch": None}
        assert row.base_commit == "b0"
        assert row.divergence == (5, 2, "tools")
        assert row.canary_arm == "candidate"


def test_team_and_budget_wait_in_any_order():
    """team from the earliest config; budget_wait while paused (latest budget event a pause
    and the run awaiting) or queued behind a budget; None once resumed or ended."""
    queued_on_budget = make("queued", 1)
    paused, resumed = make("budget_paused", 0), make("budget_resumed", 1)
    facts = [
        RunFact("r", "requested", 1, T0, make("requested", 0)),
        RunFact("r", "prepared", 2, T0, make("prepared", 0)),
        RunFact("r", "queued", 3, T0, queued_on_budget),
    ]
    for order in (facts, facts[::-1]):
        row = fold(order)
        assert row is not None
        assert row.team == "alpha"
        assert row.status == "queued"
        assert row.budget_wait == "budget b1 reached"
    more = [
        *facts,
        RunFact("r", "dispatched", 4, T0, make("dispatched", 0)),
        RunFact("r", "started", 5, T0, make("started", 0)),
        RunFact("r", "budget_paused", 6, T0, paused),
    ]
    row = fold(more[::-1])
    assert row is not None
    assert row.status == "awaiting_approval"
    assert row.budget_wait == "budget b0: team:alpha reached; asking"
    resumed_row = fold([RunFact("r", "budget_resumed", 7, T0, resumed), *more])
    assert resumed_row is not None
    assert (resumed_row.status, resumed_row.budget_wait) == ("running", None)
    ended = fold([*more, RunFact("r", "failed", 8, T0, make("failed", 0))][::-1])
    assert ended is not None
    assert (ended.status, ended.budget_wait) == ("failed", None)
    global_queue = fold([*facts[:2], RunFact("r", "queued", 3, T0, make("queued", 0))])
    assert global_queue is not None
    assert global_queue.budget_wait is None
