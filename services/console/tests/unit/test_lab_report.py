"""The lab report's drawing and layout: interval geometry on the 0-100 % axis (clamped), the
revision columns of a running eval, and the case rows with their gaps and flipped marks."""

from __future__ import annotations

import pytest
from nexus_events.events.evals import CaseCell, EvalReport, RevisionSummary

from nexus_console.lab_report import (
    LABEL_WIDTH,
    PLOT_WIDTH,
    case_rows,
    columns,
    interval_chart,
    report_of,
    reports_of,
)
from nexus_console.reads import QueryError


def _summary(revision: int, rate: float, low: float, high: float) -> RevisionSummary:
    return RevisionSummary(
        agent_id="impl", revision=revision, graded=10, passed=int(rate * 10), pass_rate=rate,
        ci_low=low, ci_high=high,
    )  # fmt: skip


def test_each_revision_is_a_bar_to_its_rate_with_whiskers_at_its_interval() -> None:
    chart = interval_chart([_summary(1, 0.5, 0.2, 0.8), _summary(2, 1.0, 0.7, 1.0)])
    first, second = chart.rows
    assert first.label == "impl@1"
    assert first.bar_width == pytest.approx(PLOT_WIDTH * 0.5)
    assert (first.low_x, first.high_x) == pytest.approx(
        (LABEL_WIDTH + PLOT_WIDTH * 0.2, LABEL_WIDTH + PLOT_WIDTH * 0.8)
    )
    assert second.y > first.y
    assert second.high_x == pytest.approx(LABEL_WIDTH + PLOT_WIDTH)
    assert [label for _, label in chart.ticks] == ["0%", "25%", "50%", "75%", "100%"]
    assert chart.height > chart.plot_bottom == 2 * (second.y - first.y)


def test_no_revision_is_an_empty_chart() -> None:
    assert interval_chart([]).rows == []


def _cell(case: str, revision: int, passed: int = 1) -> CaseCell:
    return CaseCell(case=case, agent_id="impl", revision=revision, trials=1, passed=passed)


def test_a_running_eval_has_columns_for_revisions_not_summarised_yet() -> None:
    report = EvalReport(
        eval_run_id="e", suite="s", status="running",
        revisions=[_summary(2, 1.0, 0.5, 1.0)],
        cases=[_cell("a", 1), _cell("a", 2), _cell("b", 2, passed=0)],
        flipped=["a"],
    )  # fmt: skip
    assert columns(report) == [("impl", 2), ("impl", 1)]
    rows = case_rows(report)
    assert [(r.case, r.flipped) for r in rows] == [("a", True), ("b", False)]
    assert [c.revision if c else None for c in rows[0].cells] == [2, 1]
    assert [c.revision if c else None for c in rows[1].cells] == [2, None]


def test_a_reply_that_is_no_report_names_the_field() -> None:
    with pytest.raises(QueryError) as raised:
        report_of({"eval_run_id": "e", "suite": "s", "planned": -1}, "lab.get")
    assert raised.value.status == 502
    assert "planned" in raised.value.message
    with pytest.raises(QueryError):
        reports_of({"evals": "no"}, "lab.list")
    assert reports_of({"evals": []}, "lab.list") == []
