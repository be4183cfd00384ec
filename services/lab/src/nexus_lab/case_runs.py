"""The runs an eval run asks for: a case run (the case's input and repository, or a golden
run's, on the agent revision planned) and a reviewer grader's run; and the grading of a case
run once it ended, from what core knows of it."""

from __future__ import annotations

import json
from dataclasses import dataclass

from nexus_events.contract import subjects
from nexus_events.contract.runstate import RunEvent, RunStatus
from nexus_events.events.evals import (
    EvalCase,
    EvalCaseGraded,
    EvalSuite,
    ForbiddenToolsGrader,
    GradeResult,
    ReviewerGrader,
)
from nexus_events.events.queries import RunView
from nexus_events.events.runs import Origin, RunRequested
from nexus_events.events.specs import RepoSpec
from nexus_events.transport.publish import Outgoing
from nexus_events.transport.run_requests import run_request

from nexus_lab.core_client import CoreClient
from nexus_lab.decide import reviewer_run_id
from nexus_lab.graders import RunEvidence, case_graders, grade, is_terminal, reviewer_indexes
from nexus_lab.state import EvalState, PlannedCase

SOURCE = "lab"


@dataclass(frozen=True)
class CaseSource:
    """What a case run is asked to do: the case's own, or its golden run's."""

    input: str
    repo: RepoSpec | None


class NotGoldenError(Exception):
    """A golden case's run is unknown or not marked golden: the case fails, graded."""


async def case_source(core: CoreClient, case: EvalCase) -> CaseSource:
    """The case's input and repository; a golden case's from its golden run (its request's
    input and repository, on the commit it started from). `NotGoldenError` when that run is
    unknown or not marked golden; `CoreUnavailableError` when core does not answer."""
    if case.golden is None:
        return CaseSource(case.input or "", case.repo)
    view = await core.run(case.golden)
    if view is None:
        raise NotGoldenError(f"golden run {case.golden} is unknown")
    if not view.golden:
        raise NotGoldenError(f"run {case.golden} is not marked golden")
    reply = await core.events(case.golden)
    repo: RepoSpec | None = None
    base_commit: str | None = None
    for e in reply.events if reply is not None else []:
        if e.event == RunEvent.REQUESTED and repo is None and e.body.get("repo"):
            repo = RepoSpec.model_validate(e.body["repo"])
        elif e.event == RunEvent.STARTED and base_commit is None:
            base_commit = e.body.get("base_commit")
    if repo is not None and base_commit:
        repo = repo.model_copy(update={"ref": base_commit, "branch": None})
    return CaseSource(view.input or "", repo)


def case_request(
    state: EvalState, planned: PlannedCase, run_id: str, source: CaseSource
) -> Outgoing:
    request = RunRequested(
        agent_id=planned.agent_id,
        agent_revision=planned.revision,
        input=source.input,
        repo=source.repo,
        origin=Origin.LAB,
        requested_by=state.requested_by or f"eval:{state.eval_run_id}",
        labels={
            "eval_run": state.eval_run_id,
            "case": planned.case,
            "trial": str(planned.trial),
            "revision": str(planned.revision),
        },
    )
    return run_request(run_id, request, source=SOURCE)


def reviewer_request(
    state: EvalState, planned: PlannedCase, case_run: RunView, grader: ReviewerGrader, index: int
) -> Outgoing:
    """A run of the reviewer agent on the case run's result."""
    result = json.dumps(case_run.result or {}, sort_keys=True, default=str)
    request = RunRequested(
        agent_id=grader.agent,
        input=f"Review the result of run {case_run.run_id} (case {planned.case}):\n{result}",
        origin=Origin.LAB,
        requested_by=f"eval:{state.eval_run_id}",
        labels={
            "eval_run": state.eval_run_id,
            "case": planned.case,
            "trial": str(planned.trial),
            "revision": str(planned.revision),
            "reviews": case_run.run_id,
        },
    )
    return run_request(reviewer_run_id(case_run.run_id, index), request, source=SOURCE)


def graded_event(
    planned: PlannedCase, run_id: str, grades: list[GradeResult], view: RunView | None
) -> EvalCaseGraded:
    """A case's `case_graded`: it passes when every grader passed."""
    wall = 0.0
    if view is not None and view.ended_at is not None:
        began = view.phases.get(RunStatus.REQUESTED) or min(view.phases.values(), default=None)
        if began is not None:
            wall = max(0.0, (view.ended_at - began).total_seconds())
    return EvalCaseGraded(
        case=planned.case,
        agent_id=planned.agent_id,
        revision=planned.revision,
        trial=planned.trial,
        run_id=run_id,
        passed=bool(grades) and all(g.passed for g in grades),
        grades=grades,
        status=(view.status if view is not None else None) or RunStatus.FAILED,
        cost_usd=view.cost_usd if view is not None else 0.0,
        tokens_in=view.tokens_in if view is not None else 0,
        tokens_out=view.tokens_out if view is not None else 0,
        turns=view.turns if view is not None else 0,
        wall_seconds=wall,
    )


@dataclass
class Grading:
    """The outcome of one attempt at grading a case run: its `case_graded` when decided, and
    the reviewer runs to request before it can be."""

    graded: EvalCaseGraded | None
    reviews: list[Outgoing]


async def grade_case(
    core: CoreClient, state: EvalState, suite: EvalSuite, planned: PlannedCase, run_id: str
) -> Grading:
    """Grade the case run `run_id` when core shows it ended (else nothing yet): every grader
    over its view, its tool calls and its reviewers' runs (requested here when missing)."""
    view = await core.run(run_id)
    if not is_terminal(view):
        return Grading(None, [])
    assert view is not None
    case = next(c for c in suite.cases if c.id == planned.case)
    graders = case_graders(suite, case)
    reviews: dict[int, RunView | None] = {}
    requests: list[Outgoing] = []
    if view.status == RunStatus.COMPLETED:
        for index in reviewer_indexes(graders):
            review = await core.run(reviewer_run_id(run_id, index))
            reviews[index] = review
            grader = graders[index]
            if review is None and isinstance(grader, ReviewerGrader):
                requests.append(reviewer_request(state, planned, view, grader, index))
    else:
        # A case run that did not complete fails its `completed` grader; its reviewers are
        # not asked (they would review nothing) and fail with that reason.
        graders = [g for g in graders if not isinstance(g, ReviewerGrader)]
    wants_tools = any(isinstance(g, ForbiddenToolsGrader) for g in graders)
    tools = await core.tools_called(run_id) if wants_tools else []
    grades = grade(graders, RunEvidence(view=view, tools_called=tools, reviews=reviews))
    if grades is None:
        return Grading(None, requests)
    return Grading(graded_event(planned, run_id, grades, view), requests)


def refused_event(planned: PlannedCase, run_id: str, reason: str) -> EvalCaseGraded:
    """A case that could not run (its golden run is not golden): failed, with the reason."""
    refusal = GradeResult(grader="case", passed=False, reason=reason)
    return graded_event(planned, run_id, [refusal], None)


def graded_message(state: EvalState, planned: PlannedCase, event: EvalCaseGraded) -> Outgoing:
    fid = state.eval_run_id
    return Outgoing(
        subjects.eval_event(fid, event.event_name),
        event,
        msg_id=f"eval:{fid}:{event.event_name}:{planned.key}",
    )


__all__ = [
    "CaseSource",
    "Grading",
    "NotGoldenError",
    "case_request",
    "case_source",
    "grade_case",
    "graded_message",
    "refused_event",
    "reviewer_request",
]
