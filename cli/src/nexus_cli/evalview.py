"""An eval run's report for people: the lines and tables `nexus eval show` and `ls-runs` print."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from nexus_events.events.evals import CaseCell, EvalReport, RevisionSummary

from nexus_cli.output import duration

REVISION_COLUMNS = ("REVISION", "PASS", "RATE", "95% CI", "COST/CASE", "TOKENS", "TURNS", "WALL")
CASE_COLUMNS = ("CASE", "REVISION", "PASSED", "COST", "TOKENS", "TURNS", "WALL", "FLIPPED", "WHY")
LIST_COLUMNS = ("EVAL RUN", "SUITE", "STATUS", "GRADED", "PASS RATES", "BY")


@dataclass(frozen=True)
class Section:
    """One table of a report: its title, columns and rows."""

    title: str
    columns: Sequence[str]
    rows: list[tuple[str, ...]]


def _percent(value: float) -> str:
    return f"{value * 100:.0f}%"


def _label(agent_id: str, revision: int) -> str:
    return f"{agent_id}@{revision}"


def suite_label(report: EvalReport) -> str:
    rev = f"@{report.suite_revision}" if report.suite_revision is not None else ""
    return f"{report.suite}{rev}"


def headline(report: EvalReport) -> list[str]:
    """What the eval run is and where it stands; the failure's one line when it failed."""
    lines = [
        f"eval run {report.eval_run_id}: suite {suite_label(report)} {report.status}"
        f" ({report.graded}/{report.planned} case runs graded)"
    ]
    if report.message:
        lines.append(f"  {report.message}")
    if report.flipped:
        lines.append(f"flipped: {', '.join(report.flipped)}")
    return lines


def _revision_row(r: RevisionSummary) -> tuple[str, ...]:
    return (
        _label(r.agent_id, r.revision),
        f"{r.passed}/{r.graded}",
        _percent(r.pass_rate),
        f"{_percent(r.ci_low)}-{_percent(r.ci_high)}",
        f"${r.cost_usd:.4f}",
        f"{r.tokens:.0f}",
        f"{r.turns:.1f}",
        duration(r.wall_seconds),
    )


def _case_row(c: CaseCell, flipped: set[str]) -> tuple[str, ...]:
    return (
        c.case,
        _label(c.agent_id, c.revision),
        f"{c.passed}/{c.trials}",
        f"${c.cost_usd:.4f}",
        f"{c.tokens:.0f}",
        f"{c.turns:.1f}",
        duration(c.wall_seconds),
        "yes" if c.case in flipped else "",
        "; ".join(dict.fromkeys(c.reasons)),  # each distinct reason once, in order
    )


def sections(report: EvalReport) -> list[Section]:
    """Per revision (pass rate with its 95% interval, means per case run), then per case and
    revision (trials passed, means per trial, flipped, why trials failed)."""
    flipped = set(report.flipped)
    out = []
    if report.revisions:
        out.append(
            Section(
                "per revision",
                REVISION_COLUMNS,
                [_revision_row(r) for r in report.revisions],
            )
        )
    if report.cases:
        out.append(
            Section(
                "per case",
                CASE_COLUMNS,
                [_case_row(c, flipped) for c in report.cases],
            )
        )
    return out


def list_row(report: EvalReport) -> tuple[str, ...]:
    """One eval run in `nexus eval ls-runs`."""
    rates = ", ".join(
        f"{_label(r.agent_id, r.revision)} {_percent(r.pass_rate)}" for r in report.revisions
    )
    return (
        report.eval_run_id,
        suite_label(report),
        report.status,
        f"{report.graded}/{report.planned}",
        rates,
        report.requested_by or "",
    )
