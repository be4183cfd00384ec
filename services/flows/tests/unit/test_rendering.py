"""Templates and conditions see the names they read, and fail as before on names absent."""

from __future__ import annotations

from typing import Any

import pytest

from nexus_flows.rendering import Failure, evaluate, holds, render

CTX: dict[str, Any] = {
    "input": "go",
    "plan": {"summary": "two files", "n": 2},
    "task": {"id": "T1", "input": "go", "repo": ""},
    "steps": {"plan": {"status": "succeeded"}},
}


def test_a_template_reads_its_names_and_a_literal_naming_another_is_text() -> None:
    assert render("{{ plan.summary }} for {{ task.id }}", CTX, "s") == "two files for T1"
    assert render("{{ 'input' + ' ' + input }}", CTX, "s") == "input go"
    assert render("{{ plan }}", CTX, "s") == '{"n": 2, "summary": "two files"}'


def test_conditions_and_values_read_nested_names() -> None:
    assert holds("steps.plan.status == 'succeeded' && plan.n > 1", CTX, "s") is True
    assert holds("has(plan.summary) && !has(plan.missing)", CTX, "s") is True
    assert evaluate("[plan.n, size(input)]", CTX, "s") == [2, 2]


def test_a_name_absent_from_the_context_is_an_expression_error() -> None:
    with pytest.raises(Failure) as failed:
        render("{{ nothere.x }}", CTX, "s")
    assert failed.value.reason == "expression_error"
    assert failed.value.step == "s"
    with pytest.raises(Failure):
        holds("nothere == 1", CTX, "s")
