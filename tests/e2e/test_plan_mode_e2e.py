"""Plan mode through the whole stack: an agent applied with `plan_mode: true` (stored by core
in PostgreSQL), runs on the real runner with the offline model's `plan` script, and its plan is
answered with `nexus approve` / `nexus deny` (docs/guardrails.md)."""

from __future__ import annotations

from typing import Any

import pytest
from nexus_cli.devstack.offline_model import PLAN
from nexus_testing import eventually_blocking as eventually

from tests.e2e.conftest import Stack

pytestmark = pytest.mark.timeout(150)

PLANNER = """\
id: plan-first
role: custom
description: Plans first; acts once a person approved the plan.
model: {name: offline-plan}
system_prompt: Plan, then do what the plan says. [offline-model:plan]
tools: [list_files, read_file, write_file, finish]
plan_mode: true
"""


@pytest.fixture(scope="module")
def plan_first(stack: Stack, tmp_path_factory: pytest.TempPathFactory) -> None:
    path = tmp_path_factory.mktemp("agents") / "plan-first.yaml"
    path.write_text(PLANNER)
    applied = stack.nexus("agents", "apply", "-f", str(path))
    assert applied.code == 0, applied.stderr
    shown = stack.nexus("agents", "show", "plan-first")
    assert "plan_mode: true" in shown.stdout


def _start(stack: Stack, *args: str) -> tuple[str, str]:
    """A plan-first run in the background, waiting on its plan: (run id, approval id)."""
    started = stack.nexus("run", "plan-first", "--input", "plan it", *args, "--bg", "-o", "json")
    assert started.code == 0, started.stderr
    run_id: str = started.json()["run_id"]
    events = eventually(
        lambda: stack.events(run_id),
        lambda evs: any(e["event"] == "approval_requested" for e in evs),
    )
    asked = next(e for e in events if e["event"] == "approval_requested")["body"]
    assert (asked["tool"], asked["summary"]) == ("exit_plan_mode", PLAN)
    assert stack.status(run_id) == "awaiting_approval"
    return run_id, asked["approval_id"]


def _ended(stack: Stack, run_id: str) -> dict[str, Any]:
    snap: dict[str, Any] = eventually(
        lambda: stack.nexus("attach", run_id, "-o", "json").json(),
        lambda s: s["run"]["status"] == "completed",
    )
    return snap


def _answered(stack: Stack, verb: str, note: str) -> tuple[str, dict[str, Any]]:
    """A plan-first run whose plan is answered with `nexus approve|deny`, once it ended."""
    run_id, approval = _start(stack)
    answered = stack.nexus(verb, run_id, approval, "-m", note)
    assert answered.code == 0, answered.stderr
    return run_id, _ended(stack, run_id)


def _calls(stack: Stack, run_id: str) -> list[tuple[str, bool]]:
    return [
        (e["body"]["tool"], e["body"]["refused"])
        for e in stack.events(run_id)
        if e["event"] == "tool_called"
    ]


@pytest.mark.usefixtures("plan_first")
def test_an_approved_plan_lets_the_agent_write(stack: Stack) -> None:
    run_id, snap = _answered(stack, "approve", "go")
    assert snap["run"]["result"]["summary"] == "Wrote the approved plan to PLAN.md."
    assert _calls(stack, run_id) == [
        ("list_files", False),
        ("exit_plan_mode", False),
        ("write_file", False),
        ("finish", False),
    ]


@pytest.mark.usefixtures("plan_first")
def test_a_denied_plan_is_the_result_and_nothing_is_written(stack: Stack) -> None:
    run_id, snap = _answered(stack, "deny", "not this way")
    result = snap["run"]["result"]
    assert result["summary"] == PLAN
    assert result["details"]["plan"]["decision"] == "denied"
    assert result["details"]["plan"]["comment"] == "not this way"
    # The run ended at the denial: write_file was never called.
    assert [tool for tool, _ in _calls(stack, run_id)] == ["list_files", "exit_plan_mode"]


@pytest.mark.usefixtures("plan_first")
def test_a_request_can_turn_plan_mode_off(stack: Stack) -> None:
    started = stack.nexus(
        "run", "plan-first", "--input", "just do it", "--no-plan-mode", "--bg", "-o", "json"
    )
    assert started.code == 0, started.stderr
    run_id: str = started.json()["run_id"]
    snap = _ended(stack, run_id)
    # Not in plan mode, exit_plan_mode is not offered: the offline model says it lacks it.
    assert "lacks: exit_plan_mode" in snap["run"]["result"]["summary"]
    assert not any(e["event"] == "approval_requested" for e in stack.events(run_id))
