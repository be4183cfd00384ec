"""Wilson interval and flipped cases."""

from __future__ import annotations

import pytest
from nexus_events.events.evals import CaseCell

from nexus_lab.report import flipped, majority_passes, wilson


def test_wilson_interval() -> None:
    low, high = wilson(8, 10)
    assert low == pytest.approx(0.4902, abs=1e-4)
    assert high == pytest.approx(0.9433, abs=1e-4)
    assert wilson(0, 10)[0] == 0.0
    assert wilson(10, 10)[1] == pytest.approx(1.0)
    assert wilson(10, 10)[0] == pytest.approx(0.7225, abs=1e-4)
    assert wilson(0, 0) == (0.0, 1.0)  # nothing graded says nothing


def cell(case: str, revision: int, passed: int, trials: int = 3) -> CaseCell:
    return CaseCell(case=case, agent_id="impl", revision=revision, trials=trials, passed=passed)


def test_flipped_by_majority_verdict() -> None:
    cells = [
        cell("a", 1, 0), cell("a", 2, 3),  # fails then passes: flipped
        cell("b", 1, 2), cell("b", 2, 3),  # passes by majority both times
        cell("c", 1, 1), cell("c", 2, 2),  # 1/3 fails, 2/3 passes: flipped
        cell("d", 1, 3), cell("d", 2, 0, trials=0),  # not graded for revision 2
    ]  # fmt: skip
    assert flipped(cells) == ["a", "c"]
    assert not majority_passes(1, 2)  # a tie fails
    assert majority_passes(2, 3)
