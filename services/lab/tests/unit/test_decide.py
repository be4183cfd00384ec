"""decide(): accept or refuse a request, the concurrency bound, completion; the fold it reads."""

from __future__ import annotations

from datetime import UTC, datetime

from nexus_events.contract.subjects import TOKEN_PATTERN
from nexus_events.events import Event
from nexus_events.events.evals import (
    AgentRevision,
    EvalAccepted,
    EvalCaseGraded,
    EvalCaseStarted,
    EvalCompleted,
    EvalFailed,
    EvalRequested,
    EvalSuite,
)

from nexus_lab.decide import (
    FailReason,
    SuiteRevision,
    case_run_id,
    case_run_of_reviewer,
    decide,
    reviewer_run_id,
)
from nexus_lab.state import EvalState, fold

NOW = datetime(2026, 1, 1, tzinfo=UTC)
SUITE = EvalSuite.model_validate(
    {"id": "s", "trials": 2, "cases": [{"id": "a", "input": "do a"}, {"id": "b", "input": "b"}]}
)


def folded(*events: Event) -> EvalState:
    state: EvalState | None = None
    for e in events:
        state = fold(state, "ev1", e, NOW)
    assert state is not None
    return state


def requested(**kw: object) -> EvalRequested:
    args: dict[str, object] = {"suite": "s", "agents": ["impl@1", "impl@2"], "concurrency": 3}
    args.update(kw)
    return EvalRequested.model_validate(args)


def accepted(state: EvalState) -> EvalAccepted:
    out = decide(state, SuiteRevision(4, SUITE), NOW)
    assert len(out) == 1
    assert isinstance(out[0].event, EvalAccepted)
    return out[0].event


def test_accept_pins_the_suite_revision_and_plans() -> None:
    state = folded(requested())
    event = accepted(state)
    assert event.suite_revision == 4
    assert event.cases == ["a", "b"]
    assert event.revisions == [AgentRevision(agent_id="impl", revision=r) for r in (1, 2)]
    assert (event.trials, event.concurrency) == (2, 3)  # the suite's trials
    running = fold(state, "ev1", event, NOW)
    assert running is not None
    assert running.status == "running"
    assert len(running.planned) == 2 * 2 * 2
    assert accepted(folded(requested(trials=5))).trials == 5


def test_unknown_suite_or_revision_fails_with_one_line() -> None:
    out = decide(folded(requested(suite_revision=7)), None, NOW)
    assert len(out) == 1
    failed = out[0].event
    assert isinstance(failed, EvalFailed)
    assert failed.reason == FailReason.UNKNOWN_SUITE
    assert failed.message == "no eval suite s revision 7"
    assert out[0].msg_id == "eval:ev1:failed"


def test_unknown_agent_revision_fails() -> None:
    out = decide(folded(requested()), SuiteRevision(1, SUITE), NOW, unknown_agents=["impl@2"])
    failed = out[0].event
    assert isinstance(failed, EvalFailed)
    assert (failed.reason, failed.message) == (FailReason.UNKNOWN_AGENT, "no agent revision impl@2")


def _started(state: EvalState) -> list[EvalCaseStarted]:
    return [o.event for o in decide(state, SuiteRevision(4, SUITE), NOW)]  # type: ignore[misc]


def test_at_most_concurrency_case_runs_live() -> None:
    acc = accepted(folded(requested()))
    state = folded(requested(), acc)
    first = _started(state)
    assert len(first) == 3
    assert all(isinstance(e, EvalCaseStarted) for e in first)
    state = folded(requested(), acc, *first)
    assert _started(state) == []  # three live: nothing more
    graded = EvalCaseGraded(
        case=first[0].case, agent_id="impl", revision=first[0].revision, trial=first[0].trial,
        run_id=first[0].run_id, passed=True, status="completed",
    )  # fmt: skip
    state = folded(requested(), acc, *first, graded)
    nxt = _started(state)
    assert len(nxt) == 1
    assert nxt[0].run_id not in {e.run_id for e in first}
    # Deciding again from the same state gives the same messages (ids included).
    again = decide(state, SuiteRevision(4, SUITE), NOW)
    assert [o.msg_id for o in again] == [o.msg_id for o in decide(state, SuiteRevision(4, SUITE))]


def test_completes_once_every_planned_case_is_graded() -> None:
    state = folded(requested(concurrency=64))
    acc = accepted(state)
    state = folded(requested(concurrency=64), acc)
    starts = _started(state)
    assert len(starts) == 8
    grades = [
        EvalCaseGraded(
            case=s.case,
            agent_id=s.agent_id,
            revision=s.revision,
            trial=s.trial,
            run_id=s.run_id,
            passed=(s.revision == 2 or s.case == "b"),
            status="completed",
            cost_usd=0.5,
        )
        for s in starts
    ]
    almost = folded(requested(concurrency=64), acc, *starts, *grades[:-1])
    assert not any(isinstance(o.event, EvalCompleted) for o in decide(almost, None, NOW))
    done = folded(requested(concurrency=64), acc, *starts, *grades)
    out = decide(done, SuiteRevision(4, SUITE), NOW)
    assert len(out) == 1
    completed = out[0].event
    assert isinstance(completed, EvalCompleted)
    by_rev = {s.revision: s for s in completed.revisions}
    assert (by_rev[1].graded, by_rev[1].passed, by_rev[1].pass_rate) == (4, 2, 0.5)
    assert (by_rev[2].passed, by_rev[2].pass_rate) == (4, 1.0)
    assert by_rev[1].cost_usd == 0.5
    assert completed.flipped == ["a"]
    final = fold(done, "ev1", completed, NOW)
    assert final is not None
    assert final.terminal
    assert decide(final, SuiteRevision(4, SUITE), NOW) == []


def test_fold_is_idempotent() -> None:
    state = folded(requested())
    acc = accepted(state)
    once = folded(requested(), acc)
    assert fold(once, "ev1", acc, NOW) is once
    assert fold(once, "ev1", requested(suite="other"), NOW) is once


def test_case_run_ids_are_derived_tokens() -> None:
    rid = case_run_id("eval-" + "x" * 120, "case-" + "c" * 120, "implementer", 12, 3)
    assert rid == case_run_id("eval-" + "x" * 120, "case-" + "c" * 120, "implementer", 12, 3)
    assert len(rid) <= 120
    assert TOKEN_PATTERN.fullmatch(rid)
    assert TOKEN_PATTERN.fullmatch(reviewer_run_id(rid, 3))
    # Parts that spell the same joined text still get different ids.
    assert case_run_id("e-a", "b", "x", 1, 1) != case_run_id("e", "a-b", "x", 1, 1)
    assert case_run_id("e", "a", "x", 1, 1) != case_run_id("e", "a", "x", 1, 2)
    assert case_run_of_reviewer(reviewer_run_id(rid, 2)) == (rid, 2)
    assert case_run_of_reviewer(rid) is None
