"""Eval suite files: every example validates; a bad suite is one line naming the file and the
problem (exit 2), whatever is wrong with it."""

from __future__ import annotations

from pathlib import Path

import pytest
from nexus_events.events.evals import GRADER_KINDS

from nexus_cli.errors import CliError, ExitCode
from nexus_cli.eval_suites import load_suites, parse_suite

ROOT = Path(__file__).resolve().parents[3]
EXAMPLES = ROOT / "examples" / "evals"

GOOD = """
id: smoke
cases:
  - id: one
    input: do it
    graders:
      - kind: max_turns
        turns: 3
"""


def test_every_example_suite_validates() -> None:
    files = sorted(EXAMPLES.glob("*.yaml"))
    assert files, "examples/evals holds no suite"
    loaded = load_suites([EXAMPLES])
    assert [x.path for x in loaded] == files
    smoke = next(x.document for x in loaded if x.document.id == "implementer-smoke")
    assert smoke.agent == "implementer"
    assert {g.kind for c in smoke.cases for g in c.graders} >= {"tests_pass", "details_match"}


def _fail(tmp_path: Path, text: str, name: str = "bad.yaml") -> CliError:
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(CliError) as info:
        load_suites([tmp_path])
    err = info.value
    assert err.code is ExitCode.INVALID
    assert (err.hint, err.details) == (None, [])  # one line, nothing under it
    assert "\n" not in err.message
    assert err.message.startswith(f"{path}: "), err.message
    return err


def test_an_unknown_grader_kind_names_the_file_the_grader_and_the_known_kinds(
    tmp_path: Path,
) -> None:
    err = _fail(tmp_path, GOOD.replace("max_turns", "vibes"))
    assert "cases[0].graders[0].kind: unknown grader kind 'vibes'" in err.message
    assert ", ".join(GRADER_KINDS) in err.message


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("id: x\ncases: [", "not valid YAML at line"),
        ("- a\n- b\n", "a suite must be a mapping, got list"),
        ("", "a suite must be a mapping, got nothing"),
        ("id: x\ncases: []\n", "cases: List should have at least 1 item"),
        (
            "id: x\ncases:\n  - {id: a, input: i, golden: r1}\n",
            "give exactly one of input or golden",
        ),
        (
            "id: x\ncases:\n  - {id: a, input: i, graders: [{kind: max_cost}]}\n",
            "cases[0].graders[0].usd: Field required",
        ),
        ("id: x\ncases:\n  - {id: a, input: i}\n  - {id: a, input: j}\n", "case a appears twice"),
        ("id: x y\ncases:\n  - {id: a, input: i}\n", "id: invalid id 'x y'"),
    ],
)
def test_each_kind_of_bad_suite_is_one_line(tmp_path: Path, text: str, problem: str) -> None:
    assert problem in _fail(tmp_path, text).message


def test_several_problems_say_how_many_more(tmp_path: Path) -> None:
    err = _fail(tmp_path, "cases:\n  - {id: a}\n")
    assert err.message.endswith("more)"), err.message


def test_the_same_suite_in_two_files_is_refused(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text(GOOD)
    (tmp_path / "b.yaml").write_text(GOOD)
    with pytest.raises(CliError, match="suite 'smoke' is also defined in"):
        load_suites([tmp_path])


def test_a_good_suite_parses(tmp_path: Path) -> None:
    path = tmp_path / "s.yml"
    path.write_text(GOOD)
    suite = parse_suite(path)
    assert (suite.id, [c.id for c in suite.cases]) == ("smoke", ["one"])
