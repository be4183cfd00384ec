"""Each grader passes and fails with its reason; a broken grader fails its case, not the
report; a reviewer grader waits for its reviewer run."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from nexus_events.events.evals import (
    CompletedGrader,
    DetailsMatchGrader,
    EvalSuite,
    ForbiddenToolsGrader,
    Grader,
    GradeResult,
    MaxCostGrader,
    MaxTurnsGrader,
    ReviewerGrader,
)
from nexus_events.events.evals import TestsPassGrader as _TestsPass
from nexus_events.events.queries import RunView

from nexus_lab import graders as graders_module
from nexus_lab.case_runs import graded_event
from nexus_lab.graders import RunEvidence, case_graders, grade, grade_one
from nexus_lab.state import PlannedCase

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def view(status: str = "completed", **kw: Any) -> RunView:
    base: dict[str, Any] = {
        "run_id": "r1", "status": status, "reason": None, "message": None, "agent_id": "impl",
        "task_id": None, "origin": "lab", "input": "x", "requested_by": None,
        "parent_run_id": None, "attempt": 1, "runtime": None, "runtime_handle": None,
        "queue_position": None, "catalog_revisions": {},
        "phases": {"requested": T0}, "ended_at": T0.replace(second=30), "last_event_at": None,
        "turns": 4, "tokens_in": 100, "tokens_out": 20, "cost_usd": 0.02,
        "result": {"summary": "ok", "tests_passed": True, "details": {"a": {"b": "yes 42"}}},
        "last_seq": 1,
    }  # fmt: skip
    base.update(kw)
    return RunView.model_validate(base)


def one(grader: Grader, evidence: RunEvidence) -> GradeResult:
    return grade_one(grader, evidence, 0)


@pytest.mark.parametrize(
    ("grader", "passing", "failing", "reason"),
    [
        (CompletedGrader(), view(), view("failed", reason="timeout"), "run failed (timeout)"),
        (_TestsPass(), view(), view(result={"tests_passed": False}), "last test run failed"),
        (_TestsPass(), view(), view(result={}), "no test run recorded"),
        (
            DetailsMatchGrader(field="a.b", equals="yes 42"),
            view(),
            view(result={"details": {"a": {"b": "no"}}}),
            "details.a.b = 'no', expected 'yes 42'",
        ),
        (
            DetailsMatchGrader(field="a.b", matches=r"\d+"),
            view(),
            view(result={"details": {"a": {"b": "none"}}}),
            "does not match",
        ),
        (
            DetailsMatchGrader(field="a.c", equals=1),
            view(result={"details": {"a": {"c": 1}}}),
            view(),
            "details.a.c is missing",
        ),
        (MaxCostGrader(usd=0.05), view(), view(cost_usd=0.5), "cost $0.5000 > $0.0500"),
        (MaxTurnsGrader(turns=4), view(), view(turns=9), "9 turns > 4"),
    ],
)
def test_each_grader_passes_and_fails_with_its_reason(
    grader: Grader, passing: RunView, failing: RunView, reason: str
) -> None:
    assert one(grader, RunEvidence(passing)).passed
    verdict = one(grader, RunEvidence(failing))
    assert not verdict.passed
    assert reason in verdict.reason
    assert verdict.grader == grader.label()


def test_forbidden_tools() -> None:
    grader = ForbiddenToolsGrader(tools=["shell", "web_fetch"])
    assert one(grader, RunEvidence(view(), tools_called=["read_file"])).passed
    verdict = one(grader, RunEvidence(view(), tools_called=["web_fetch", "shell", "shell"]))
    assert (verdict.passed, verdict.reason) == (False, "called shell, web_fetch")


def test_reviewer_waits_for_its_run_then_reads_the_verdict() -> None:
    grader = ReviewerGrader(agent="reviewer")
    assert grade([grader], RunEvidence(view(), reviews={0: None})) is None
    running = view("running", run_id="r1-rv0", result=None)
    assert grade([grader], RunEvidence(view(), reviews={0: running})) is None
    approve = view(run_id="r1-rv0", result={"details": {"verdict": "approve"}})
    assert grade([grader], RunEvidence(view(), reviews={0: approve})) == [
        GradeResult(grader="reviewer", passed=True, reason="")
    ]
    changes = view(run_id="r1-rv0", result={"details": {"verdict": "request_changes"}})
    out = grade([grader], RunEvidence(view(), reviews={0: changes}))
    assert out is not None
    assert (out[0].passed, out[0].reason) == (False, "reviewer reviewer said 'request_changes'")


def test_a_broken_grader_fails_its_case_with_the_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*_: object) -> tuple[bool, str]:
        raise ZeroDivisionError("division by zero")

    monkeypatch.setitem(graders_module._GRADE, MaxTurnsGrader, broken)  # type: ignore[misc]
    out = grade([CompletedGrader(), MaxTurnsGrader(turns=3)], RunEvidence(view()))
    assert out is not None
    assert out[0].passed
    assert not out[1].passed
    assert out[1].reason == "grader error: ZeroDivisionError: division by zero"
    planned = PlannedCase(case="a", agent_id="impl", revision=1, trial=1)
    graded = graded_event(planned, "r1", out, view())
    assert not graded.passed
    assert graded.wall_seconds == 30.0
    assert (graded.tokens_in, graded.tokens_out, graded.turns) == (100, 20, 4)


def test_completed_is_implicit_once() -> None:
    suite = EvalSuite.model_validate(
        {"id": "s", "graders": [{"kind": "max_turns", "turns": 3}],
         "cases": [{"id": "a", "input": "x", "graders": [{"kind": "tests_pass"}]},
                   {"id": "b", "input": "y", "graders": [{"kind": "completed", "name": "done"}]}]}
    )  # fmt: skip
    kinds = [g.kind for g in case_graders(suite, suite.cases[0])]
    assert kinds == ["completed", "max_turns", "tests_pass"]
    assert [g.label() for g in case_graders(suite, suite.cases[1])] == ["max_turns", "done"]
