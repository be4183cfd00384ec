"""The numbers of an eval report: per revision pass rates with a Wilson 95% interval and
means, per (case, revision) cells, and the cases whose majority verdict flips by revision."""

from __future__ import annotations

import math
from collections.abc import Iterable

from nexus_events.events.evals import (
    AgentRevision,
    CaseCell,
    EvalReport,
    EvalStatus,
    RevisionSummary,
)

from nexus_lab.state import EvalState, GradedCase

Z95 = 1.959963984540054  # the normal quantile of a two-sided 95% interval


def wilson(passed: int, n: int, z: float = Z95) -> tuple[float, float]:
    """The Wilson score interval of `passed` successes in `n` trials; (0, 1) when n is 0:
    nothing graded says nothing."""
    if n <= 0:
        return 0.0, 1.0
    p = passed / n
    denominator = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denominator
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denominator
    return max(0.0, centre - half), min(1.0, centre + half)


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def summary(revision: AgentRevision, graded: list[GradedCase]) -> RevisionSummary:
    passed = sum(1 for g in graded if g.passed)
    low, high = wilson(passed, len(graded))
    return RevisionSummary(
        agent_id=revision.agent_id,
        revision=revision.revision,
        graded=len(graded),
        passed=passed,
        pass_rate=passed / len(graded) if graded else 0.0,
        ci_low=low,
        ci_high=high,
        cost_usd=_mean([g.cost_usd for g in graded]),
        tokens=_mean([float(g.tokens) for g in graded]),
        turns=_mean([float(g.turns) for g in graded]),
        wall_seconds=_mean([g.wall_seconds for g in graded]),
    )


def _graded_of(
    state: EvalState, revision: AgentRevision, case: str | None = None
) -> list[GradedCase]:
    return [
        state.graded[p.key]
        for p in state.planned
        if p.key in state.graded
        and (p.agent_id, p.revision) == (revision.agent_id, revision.revision)
        and (case is None or p.case == case)
    ]


def summaries(state: EvalState) -> list[RevisionSummary]:
    return [summary(r, _graded_of(state, r)) for r in state.revisions]


def majority_passes(passed: int, trials: int) -> bool:
    """A case passes for a revision when more than half its trials passed (a tie fails)."""
    return 2 * passed > trials


def flipped(cells: Iterable[CaseCell]) -> list[str]:
    """Cases graded for at least two revisions whose majority verdicts differ, in case order."""
    verdicts: dict[str, set[bool]] = {}
    for cell in cells:
        if cell.trials:
            verdicts.setdefault(cell.case, set()).add(majority_passes(cell.passed, cell.trials))
    return [case for case, seen in verdicts.items() if len(seen) > 1]


def cells(state: EvalState) -> list[CaseCell]:
    out = []
    for case in state.cases:
        for r in state.revisions:
            graded = _graded_of(state, r, case)
            out.append(
                CaseCell(
                    case=case,
                    agent_id=r.agent_id,
                    revision=r.revision,
                    trials=len(graded),
                    passed=sum(1 for g in graded if g.passed),
                    runs=[g.run_id for g in graded],
                    reasons=[_why(g) for g in graded if not g.passed],
                    cost_usd=_mean([g.cost_usd for g in graded]),
                    tokens=_mean([float(g.tokens) for g in graded]),
                    turns=_mean([float(g.turns) for g in graded]),
                    wall_seconds=_mean([g.wall_seconds for g in graded]),
                )
            )
    return out


def _why(graded: GradedCase) -> str:
    failed = [f"{g.grader}: {g.reason}" if g.reason else g.grader for g in graded.grades]
    failed = [f for f, g in zip(failed, graded.grades, strict=True) if not g.passed]
    return f"{graded.run_id}: " + ("; ".join(failed) or graded.status)


def report(state: EvalState) -> EvalReport:
    """The eval run's report as its events give it (live figures until it completes)."""
    case_cells = cells(state)
    done = state.status == EvalStatus.COMPLETED
    return EvalReport(
        eval_run_id=state.eval_run_id,
        suite=state.suite,
        suite_revision=state.suite_revision,
        status=state.status,
        message=state.message,
        planned=len(state.planned),
        graded=len(state.graded),
        revisions=state.summaries if done else summaries(state),
        cases=case_cells,
        flipped=state.flipped if done else flipped(case_cells),
        requested_by=state.requested_by,
    )


__all__ = ["cells", "flipped", "majority_passes", "report", "summaries", "summary", "wilson"]
