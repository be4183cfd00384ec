"""An eval run's report as the lab pages draw it: the lab's reply checked against the
contract's `EvalReport`, each revision's pass rate with its 95% interval as SVG geometry, and
the cases laid out by revision."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from nexus_events.events.evals import CaseCell, EvalReport, RevisionSummary
from pydantic import ValidationError

from nexus_console.reads import QueryError

# The interval chart's geometry (SVG user units): a label column, then the 0..100 % axis.
LABEL_WIDTH = 150
PLOT_WIDTH = 420
ROW_HEIGHT = 34
BAR_HEIGHT = 16
AXIS_HEIGHT = 22
# The axis' ticks, as pass rates.
TICKS = (0.0, 0.25, 0.5, 0.75, 1.0)


def report_of(data: dict[str, Any], subject: str) -> EvalReport:
    """The lab's reply as the contract's model; a reply that is not one is the lab's fault
    (502 naming the first bad field), not a page crash."""
    try:
        return EvalReport.model_validate(data)
    except ValidationError as exc:
        first = exc.errors(include_url=False, include_input=False)[0]
        where = ".".join(str(p) for p in first["loc"]) or "(body)"
        message = f"{subject} answered no eval report: {where}: {first['msg']}"
        raise QueryError(502, message) from None


def reports_of(data: dict[str, Any], subject: str) -> list[EvalReport]:
    """The `evals` of a list reply, each checked as `report_of` does."""
    items = data.get("evals")
    if not isinstance(items, list):
        raise QueryError(502, f"{subject} answered no list of eval runs")
    return [report_of(item if isinstance(item, dict) else {}, subject) for item in items]


@dataclass(frozen=True, slots=True)
class IntervalRow:
    """One revision's bar (its pass rate) and whiskers (its Wilson 95% interval)."""

    label: str
    summary: RevisionSummary
    y: float  # the bar's top
    mid: float  # the bar's vertical middle: the whisker's line
    bar_width: float
    low_x: float
    high_x: float


@dataclass(frozen=True, slots=True)
class IntervalChart:
    rows: list[IntervalRow]
    ticks: list[tuple[float, str]]  # (x, label)
    width: int
    height: int
    plot_left: int
    plot_bottom: float


def _x(rate: float) -> float:
    """A pass rate's x, clamped to the axis (a lab answering 1.02 draws at the edge)."""
    return LABEL_WIDTH + PLOT_WIDTH * min(max(rate, 0.0), 1.0)


def interval_chart(revisions: list[RevisionSummary]) -> IntervalChart:
    """Horizontal bars, one per revision in the report's order, on a shared 0-100 % axis."""
    rows = []
    for i, summary in enumerate(revisions):
        top = i * ROW_HEIGHT + (ROW_HEIGHT - BAR_HEIGHT) / 2
        rows.append(
            IntervalRow(
                label=f"{summary.agent_id}@{summary.revision}",
                summary=summary,
                y=top,
                mid=top + BAR_HEIGHT / 2,
                bar_width=_x(summary.pass_rate) - LABEL_WIDTH,
                low_x=_x(summary.ci_low),
                high_x=_x(summary.ci_high),
            )
        )
    plot_bottom = len(rows) * ROW_HEIGHT
    return IntervalChart(
        rows=rows,
        ticks=[(_x(t), f"{t:.0%}") for t in TICKS],
        width=LABEL_WIDTH + PLOT_WIDTH + 20,
        height=plot_bottom + AXIS_HEIGHT,
        plot_left=LABEL_WIDTH,
        plot_bottom=plot_bottom,
    )


@dataclass(frozen=True, slots=True)
class CaseRow:
    """One case: its cell for each column (None where that revision has no trial yet)."""

    case: str
    flipped: bool
    cells: list[CaseCell | None]


def columns(report: EvalReport) -> list[tuple[str, int]]:
    """The revisions compared, as (agent, revision): the report's summaries first, then any
    revision only its cases name yet (a running eval has cells before summaries)."""
    seen = [(r.agent_id, r.revision) for r in report.revisions]
    for cell in report.cases:
        key = (cell.agent_id, cell.revision)
        if key not in seen:
            seen.append(key)
    return seen


def case_rows(report: EvalReport) -> list[CaseRow]:
    """Every case in the order the lab gave it, flipped ones marked."""
    cols = columns(report)
    by_case: dict[str, dict[tuple[str, int], CaseCell]] = {}
    for cell in report.cases:
        by_case.setdefault(cell.case, {})[(cell.agent_id, cell.revision)] = cell
    flipped = set(report.flipped)
    return [
        CaseRow(case, case in flipped, [cells.get(col) for col in cols])
        for case, cells in by_case.items()
    ]
