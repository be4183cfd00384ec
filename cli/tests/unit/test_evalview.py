"""`nexus eval show`'s rendering of an EvalReport: per revision (pass rate, 95% interval,
means), per case and revision (trials passed, why they failed), flipped cases."""

from __future__ import annotations

from nexus_events.events.evals import CaseCell, EvalReport, RevisionSummary

from nexus_cli.evalview import CASE_COLUMNS, REVISION_COLUMNS, headline, list_row, sections


def report(**changes: object) -> EvalReport:
    base = EvalReport(
        eval_run_id="ev-1",
        suite="smoke",
        suite_revision=2,
        status="completed",
        planned=4,
        graded=4,
        revisions=[
            RevisionSummary(
                agent_id="impl", revision=3, graded=2, passed=1, pass_rate=0.5,
                ci_low=0.0945, ci_high=0.9055, cost_usd=0.0125, tokens=1500.4, turns=4.5,
                wall_seconds=75,
            ),
            RevisionSummary(
                agent_id="impl", revision=4, graded=2, passed=2, pass_rate=1.0,
                ci_low=0.342, ci_high=1.0, cost_usd=0.01, tokens=900, turns=3, wall_seconds=40,
            ),
        ],
        cases=[
            CaseCell(
                case="fix-add", agent_id="impl", revision=3, trials=1, passed=0,
                runs=["r1"], reasons=["tests_pass: tests failed", "tests_pass: tests failed"],
                cost_usd=0.02, tokens=2000, turns=6, wall_seconds=100,
            ),
            CaseCell(
                case="fix-add", agent_id="impl", revision=4, trials=1, passed=1,
                runs=["r2"], cost_usd=0.01, tokens=900, turns=3, wall_seconds=42,
            ),
        ],
        flipped=["fix-add"],
        requested_by="ana",
    )  # fmt: skip
    return base.model_copy(update=changes)


def test_the_revision_table_gives_pass_rate_interval_and_means() -> None:
    per_revision, per_case = sections(report())
    assert (per_revision.title, tuple(per_revision.columns)) == ("per revision", REVISION_COLUMNS)
    assert per_revision.rows == [
        ("impl@3", "1/2", "50%", "9%-91%", "$0.0125", "1500", "4.5", "1m15s"),
        ("impl@4", "2/2", "100%", "34%-100%", "$0.0100", "900", "3.0", "40s"),
    ]
    assert tuple(per_case.columns) == CASE_COLUMNS
    assert per_case.rows == [
        ("fix-add", "impl@3", "0/1", "$0.0200", "2000", "6.0", "1m40s", "yes",
         "tests_pass: tests failed"),
        ("fix-add", "impl@4", "1/1", "$0.0100", "900", "3.0", "42s", "yes", ""),
    ]  # fmt: skip


def test_the_headline_says_where_it_stands_why_it_failed_and_what_flipped() -> None:
    assert headline(report()) == [
        "eval run ev-1: suite smoke@2 completed (4/4 case runs graded)",
        "flipped: fix-add",
    ]
    failed = report(
        status="failed", message="no suite 'smoke'", suite_revision=None, planned=0, graded=0,
        revisions=[], cases=[], flipped=[],
    )  # fmt: skip
    assert headline(failed) == [
        "eval run ev-1: suite smoke failed (0/0 case runs graded)",
        "  no suite 'smoke'",
    ]
    assert sections(failed) == []


def test_a_list_row_gives_each_revisions_pass_rate() -> None:
    assert list_row(report(status="running", graded=3)) == (
        "ev-1", "smoke@2", "running", "3/4", "impl@3 50%, impl@4 100%", "ana",
    )  # fmt: skip
