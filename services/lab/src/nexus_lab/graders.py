"""Grading one case run (pure): every grader of the case over what core knows of the run, each
verdict a `GradeResult`; a grader that raises fails with its reason, never the report."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from nexus_events.contract.runstate import TERMINAL, RunStatus
from nexus_events.events.evals import (
    CompletedGrader,
    DetailsMatchGrader,
    EvalCase,
    EvalSuite,
    ForbiddenToolsGrader,
    Grader,
    GradeResult,
    MaxCostGrader,
    MaxTurnsGrader,
    ReviewerGrader,
    TestsPassGrader,
)
from nexus_events.events.queries import RunView


def case_graders(suite: EvalSuite, case: EvalCase) -> list[Grader]:
    """The suite's graders, then the case's, after the implicit `completed` (unless named)."""
    graders: list[Grader] = [*suite.graders, *case.graders]
    if not any(isinstance(g, CompletedGrader) for g in graders):
        graders.insert(0, CompletedGrader())
    return graders


def is_terminal(view: RunView | None) -> bool:
    return view is not None and view.status in TERMINAL


@dataclass(frozen=True)
class RunEvidence:
    """What the graders look at: core's view of the case run, the names of the tools it
    called, and each reviewer grader's run (by its index; None: not ended yet)."""

    view: RunView
    tools_called: Sequence[str] = ()
    reviews: dict[int, RunView | None] = field(default_factory=dict)

    @property
    def result(self) -> dict[str, Any]:
        return self.view.result or {}


class PendingError(Exception):
    """A grader cannot decide yet (its reviewer run has not ended)."""


def _completed(g: CompletedGrader, ev: RunEvidence, _: int) -> tuple[bool, str]:
    if ev.view.status == RunStatus.COMPLETED:
        return True, ""
    return False, f"run {ev.view.status}" + (f" ({ev.view.reason})" if ev.view.reason else "")


def _tests_pass(g: TestsPassGrader, ev: RunEvidence, _: int) -> tuple[bool, str]:
    passed = ev.result.get("tests_passed")
    if passed is True:
        return True, ""
    return False, "no test run recorded" if passed is None else "the last test run failed"


_MISSING = object()


def dotted(details: Any, path: str) -> Any:
    """`details` at a dotted path (``a.b.0``); `_MISSING` when a step is absent."""
    value = details
    for part in path.split("."):
        if isinstance(value, dict) and part in value:
            value = value[part]
        elif isinstance(value, list) and part.isdigit() and int(part) < len(value):
            value = value[int(part)]
        else:
            return _MISSING
    return value


def _details_match(g: DetailsMatchGrader, ev: RunEvidence, _: int) -> tuple[bool, str]:
    value = dotted(ev.result.get("details") or {}, g.field)
    if value is _MISSING:
        return False, f"details.{g.field} is missing"
    if g.matches is not None:
        if re.search(g.matches, str(value)):
            return True, ""
        return False, f"details.{g.field} = {str(value)[:80]!r} does not match {g.matches!r}"
    if value == g.equals:
        return True, ""
    return False, f"details.{g.field} = {str(value)[:80]!r}, expected {g.equals!r}"


def _reviewer(g: ReviewerGrader, ev: RunEvidence, index: int) -> tuple[bool, str]:
    review = ev.reviews.get(index)
    if not is_terminal(review):
        raise PendingError(g.agent)
    assert review is not None
    if review.status != RunStatus.COMPLETED:
        return False, f"reviewer run {review.run_id} {review.status}"
    verdict = dotted(((review.result or {}).get("details") or {}), g.field)
    if verdict == g.approve:
        return True, ""
    shown = "no verdict" if verdict is _MISSING else repr(verdict)
    return False, f"reviewer {g.agent} said {shown}"


def _max_cost(g: MaxCostGrader, ev: RunEvidence, _: int) -> tuple[bool, str]:
    cost = ev.view.cost_usd
    return (True, "") if cost <= g.usd else (False, f"cost ${cost:.4f} > ${g.usd:.4f}")


def _max_turns(g: MaxTurnsGrader, ev: RunEvidence, _: int) -> tuple[bool, str]:
    turns = ev.view.turns
    return (True, "") if turns <= g.turns else (False, f"{turns} turns > {g.turns}")


def _forbidden_tools(g: ForbiddenToolsGrader, ev: RunEvidence, _: int) -> tuple[bool, str]:
    called = sorted(set(g.tools) & set(ev.tools_called))
    return (True, "") if not called else (False, f"called {', '.join(called)}")


_GRADE: dict[type[Any], Callable[[Any, RunEvidence, int], tuple[bool, str]]] = {
    CompletedGrader: _completed,
    TestsPassGrader: _tests_pass,
    DetailsMatchGrader: _details_match,
    ReviewerGrader: _reviewer,
    MaxCostGrader: _max_cost,
    MaxTurnsGrader: _max_turns,
    ForbiddenToolsGrader: _forbidden_tools,
}


def grade_one(grader: Grader, evidence: RunEvidence, index: int) -> GradeResult:
    """One grader's verdict; `PendingError` when it cannot decide yet; any other error fails it
    with the error as its reason."""
    try:
        passed, reason = _GRADE[type(grader)](grader, evidence, index)
    except PendingError:
        raise
    except Exception as exc:  # noqa: BLE001 - a broken grader fails its case, not the report
        passed, reason = False, f"grader error: {type(exc).__name__}: {exc}"
    return GradeResult(grader=grader.label(), passed=passed, reason=reason[:300])


def grade(graders: Sequence[Grader], evidence: RunEvidence) -> list[GradeResult] | None:
    """Every grader's verdict, or None while one of them is pending."""
    try:
        return [grade_one(g, evidence, i) for i, g in enumerate(graders)]
    except PendingError:
        return None


def reviewer_indexes(graders: Sequence[Grader]) -> list[int]:
    return [i for i, g in enumerate(graders) if isinstance(g, ReviewerGrader)]


__all__ = [
    "RunEvidence",
    "case_graders",
    "dotted",
    "grade",
    "grade_one",
    "is_terminal",
    "reviewer_indexes",
]
