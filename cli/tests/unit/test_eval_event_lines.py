"""`nexus eval run --wait`: one line per eval-run event, naming what a person needs (the
case, revision and trial, the run, each failing grader's reason)."""

from __future__ import annotations

from nexus_events.events import (
    EvalAccepted,
    EvalCaseGraded,
    EvalCaseStarted,
    EvalCompleted,
    EvalFailed,
    EvalRequested,
)
from nexus_events.events.evals import AgentRevision, EvalEvent, GradeResult, RevisionSummary

from nexus_cli.eval_requests import describe_eval_event


def test_each_eval_event_is_one_line() -> None:
    lines = [
        describe_eval_event(
            EvalEvent.REQUESTED,
            EvalRequested(suite="s", agents=["a@1", "a@2"], trials=2, requested_by="ana"),
        ),
        describe_eval_event(
            EvalEvent.ACCEPTED,
            EvalAccepted(
                suite="s", suite_revision=3, cases=["c1", "c2"],
                revisions=[AgentRevision.parse("a@1"), AgentRevision.parse("a@2")],
                trials=2, concurrency=4,
            ),
        ),
        describe_eval_event(
            EvalEvent.CASE_STARTED,
            EvalCaseStarted(case="c1", agent_id="a", revision=2, trial=1, run_id="r-9"),
        ),
        describe_eval_event(
            EvalEvent.CASE_GRADED,
            EvalCaseGraded(
                case="c1", agent_id="a", revision=2, trial=1, run_id="r-9", passed=False,
                status="completed",
                grades=[
                    GradeResult(grader="completed", passed=True),
                    GradeResult(grader="max_turns", passed=False, reason="12 turns > 5"),
                ],
            ),
        ),
        describe_eval_event(
            EvalEvent.CASE_GRADED,
            EvalCaseGraded(
                case="c2", agent_id="a", revision=1, trial=2, run_id="r-3", passed=True,
                status="completed",
            ),
        ),
        describe_eval_event(
            EvalEvent.COMPLETED,
            EvalCompleted(
                revisions=[RevisionSummary(agent_id="a", revision=1, graded=4, passed=3)]
            ),
        ),
        describe_eval_event(
            EvalEvent.FAILED, EvalFailed(reason="unknown_agent", message="no agent a@9")
        ),
    ]  # fmt: skip
    assert lines == [
        "requested: suite s for a@1, a@2 x 2 trials by ana",
        "accepted: suite s@3, 2 cases x a@1, a@2 x 2 trials (8 case runs, 4 at once)",
        "case c1 a@2 trial 1 started: run r-9",
        "case c1 a@2 trial 1 FAIL (completed): max_turns: 12 turns > 5",
        "case c2 a@1 trial 2 pass (completed)",
        "completed: a@1 3/4",
        "failed (unknown_agent): no agent a@9",
    ]
