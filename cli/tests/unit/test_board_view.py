"""The board view's lines for a task's delegated runs (pure)."""

from __future__ import annotations

from nexus_cli.commands.board import child_lines


def test_children_nest_under_the_run_that_delegated_them() -> None:
    task = {
        "child_runs": [
            {"run_id": "c1", "status": "running", "agent_id": "reviewer", "parent_run_id": "p"},
            {"run_id": "c2", "status": None, "agent_id": None, "parent_run_id": "p"},
            {"run_id": "g1", "status": "failed", "agent_id": "tester", "parent_run_id": "c1"},
            # A hand-made loop (no such chain comes from the gateway) is still shown.
            {"run_id": "x", "status": "queued", "agent_id": "a", "parent_run_id": "y"},
            {"run_id": "y", "status": "queued", "agent_id": "b", "parent_run_id": "x"},
        ]
    }
    assert child_lines(task) == [
        "  ↳ reviewer  c1  running",
        "    ↳ tester  g1  failed",
        "  ↳ ?  c2  ?",
        "  ↳ a  x  queued",
        "    ↳ b  y  queued",
    ]
    assert child_lines({"child_runs": []}) == []
