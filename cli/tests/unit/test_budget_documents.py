"""Reading budgets for `nexus budgets apply` (no servers): the examples validate, and a file
that is not a budget is one line naming it (exit 2)."""

from __future__ import annotations

from pathlib import Path

import pytest
from nexus_events.events.budgets import OnExceed, ScopeKind

from nexus_cli.budget_documents import load_budgets, parse_budget
from nexus_cli.errors import CliError, ExitCode

EXAMPLES = Path(__file__).resolve().parents[3] / "examples" / "budgets"


def test_the_examples_are_a_team_budget_that_asks_and_a_per_task_one_that_stops() -> None:
    budgets = {b.document.id: b.document for b in load_budgets([EXAMPLES])}
    team = budgets["alpha-monthly"]
    assert (team.scope.kind, team.scope.name, team.on_exceed) == (
        ScopeKind.TEAM,
        "alpha",
        OnExceed.ASK,
    )
    assert team.approvers() == ["team:alpha"]
    task = budgets["per-task"]
    assert (task.scope.kind, task.scope.name, task.on_exceed) == (
        ScopeKind.TASK,
        None,
        OnExceed.STOP,
    )


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("id: [unclosed", "not valid YAML at line 1"),
        ("", "a budget must be a mapping, got nothing"),
        ("- a list", "a budget must be a mapping, got list"),
        ("id: b\nscope: global:all\nperiod: day\nlimits: {runs: 1}\n", "scope: scope global"),
    ],
)
def test_a_file_that_is_not_a_budget_is_one_line(tmp_path: Path, text: str, problem: str) -> None:
    path = tmp_path / "b.yaml"
    path.write_text(text)
    with pytest.raises(CliError) as caught:
        parse_budget(path)
    assert caught.value.code is ExitCode.INVALID
    assert caught.value.message.startswith(f"{path}: {problem}"), caught.value.message
    assert "\n" not in caught.value.message


def test_the_same_id_in_two_files_is_refused(tmp_path: Path) -> None:
    for name in ("a.yaml", "b.yaml"):
        (tmp_path / name).write_text("id: same\nscope: global\nperiod: day\nlimits: {runs: 1}\n")
    with pytest.raises(CliError) as caught:
        load_budgets([tmp_path])
    assert caught.value.message == (
        f"{tmp_path / 'b.yaml'}: budget 'same' is also defined in {tmp_path / 'a.yaml'}"
    )
