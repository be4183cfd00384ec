"""Flows through the whole stack (docs/flows.md): `nexus flows apply`, `nexus flow run`, the
real flows service, core, scheduler and runner, and the offline model playing planner,
implementer, reviewer and tester.

The feature flow (examples/flows/feature.yaml) loops once through review and completes; a
gate is answered with `nexus approve`, as any approval; `nexus flow cancel` stops a flow and
its live run.
"""

from __future__ import annotations

import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
from nexus_cli.devstack.offline_model import NEGATIVE_TEST_FILE, REVIEW_FINDING
from nexus_testing import eventually_blocking

from tests.e2e.conftest import EXAMPLES, RUN_WAIT, Stack

pytestmark = pytest.mark.timeout(240)

# A person approves, then the planner plans.
GATED = """\
id: e2e_gated
steps:
  - {id: ok, kind: gate, summary: "Plan {{ input }}?"}
  - {id: plan, kind: run, agent: planner, input: "Plan this task: {{ input }}"}
"""
# One run that takes ten minutes unless cancelled (the offline model's `slow` script).
SLOW = """\
id: e2e_slow
steps:
  - {id: work, kind: run, agent: implementer, input: "[offline-model:slow] take your time"}
"""
# The flows' step sequence for the scripted team: the reviewer asks for one change.
FEATURE_STEPS = [
    ("plan", 1, "succeeded"),
    ("implement", 1, "succeeded"),
    ("review", 1, "succeeded"),
    ("implement", 2, "succeeded"),
    ("review", 2, "succeeded"),
    ("test", 1, "succeeded"),
]


def _flow_run_id(name: str) -> str:
    # '_' not '-', as `nexus flow run` picks them: no '-r<n>' that reads as a step's round.
    return f"e2e_{name}_{uuid.uuid4().hex[:6]}"


@pytest.fixture(scope="module")
def flows(stack: Stack, tmp_path_factory: pytest.TempPathFactory) -> None:
    """examples/skills, agents and flows, and this module's flows, applied with the CLI."""
    for kind, path in (("skills", "skills"), ("agents", "agents")):
        applied = stack.nexus(kind, "apply", "-f", str(EXAMPLES / path))
        assert applied.code == 0, applied.stderr
    mine = tmp_path_factory.mktemp("flows")
    (mine / "gated.yaml").write_text(GATED)
    (mine / "slow.yaml").write_text(SLOW)
    # --timeout: validation asks core's catalog, slow on a loaded machine.
    applied = stack.nexus("--timeout", "30", "flows", "apply", str(EXAMPLES / "flows"), str(mine))
    assert applied.code == 0, applied.stderr


def _show(stack: Stack, flow_run_id: str) -> dict[str, Any]:
    shown = stack.nexus("flow", "show", flow_run_id, "-o", "json")
    assert shown.code == 0, shown.stderr
    view: dict[str, Any] = shown.json()
    return view


def _until(stack: Stack, flow_run_id: str, *statuses: str) -> dict[str, Any]:
    def view() -> dict[str, Any]:
        shown = stack.nexus("flow", "show", flow_run_id, "-o", "json")
        return shown.json() if shown.code == 0 else {}

    return eventually_blocking(view, lambda v: v.get("status") in statuses, within=RUN_WAIT)


def _start(stack: Stack, flow: str, *args: str) -> str:
    fid = _flow_run_id(flow.removeprefix("e2e_"))
    started = stack.nexus("flow", "run", flow, "--flow-run-id", fid, *args, "-o", "json")
    assert started.code == 0, started.stderr
    assert started.json() == {"flow_run_id": fid, "status": "requested"}
    return fid


def _event(stack: Stack, run_id: str, name: str) -> dict[str, Any]:
    body: dict[str, Any] = next(e for e in stack.events(run_id) if e["event"] == name)["body"]
    return body


def _git(repo: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", "-C", str(repo), *args], capture_output=True, text=True, check=True
    )
    return done.stdout


@pytest.mark.usefixtures("flows")
def test_the_feature_flow_loops_through_review_and_completes(
    stack: Stack, demo_repo: Path, tmp_path: Path
) -> None:
    assert stack.nexus("task", "create", "Fix calc", "--id", "E2E-FLOW").code == 0
    fid = _flow_run_id("feature")
    followed = stack.nexus(
        "flow", "run", "feature", "--task", "E2E-FLOW", "--repo", str(demo_repo),
        "--input", "Fix the failing test", "--flow-run-id", fid,
        "--follow", "--wait", str(2 * RUN_WAIT), "-o", "json",
        timeout=2 * RUN_WAIT + 30,
    )  # fmt: skip
    assert followed.code == 0, followed.stdout + followed.stderr
    assert followed.json()["status"] == "completed"

    view = _show(stack, fid)
    assert (view["status"], view["task_id"], view["flow"]) == ("completed", "E2E-FLOW", "feature")
    assert [(s["step"], s["round"], s["status"]) for s in view["steps"]] == FEATURE_STEPS
    runs = {(s["step"], s["round"]): s["run_id"] for s in view["steps"]}
    assert runs[("implement", 2)] == f"{fid}-implement-r2"

    # The reviewer asked for changes in round 1 (the flow routed on it), approved in round 2.
    verdicts = [
        _event(stack, runs[("review", r)], "completed")["result"]["details"] for r in (1, 2)
    ]
    assert verdicts[0] == {"verdict": "request_changes", "findings": [REVIEW_FINDING]}
    assert verdicts[1]["verdict"] == "approve"
    assert view["outputs"]["review"]["verdict"] == "approve"
    assert view["outputs"]["test"]["passed"] is True
    # ... and round 2 of the implementer was told what it asked for.
    assert REVIEW_FINDING in _event(stack, runs[("implement", 2)], "requested")["input"]

    # Each step worked on the branch the step before it left: the plan left none (it pushed
    # nothing), so the implementer started from main; the reviewer read each implementer
    # round's branch; round 2 started from round 1's; the tester tested round 2's.
    def ref(step: str, round: int) -> str | None:
        repo = _event(stack, runs[(step, round)], "prepared")["config"]["repo"]
        assert repo["url"] == str(demo_repo)
        return repo.get("ref")

    first, second = f"nexus/{fid}-implement-r1", f"nexus/{fid}-implement-r2"
    assert ref("implement", 1) in (None, "main")
    assert ref("review", 1) == first
    assert ref("implement", 2) == first
    assert ref("review", 2) == second
    assert ref("test", 1) == second
    # Round 2 of the implementer was handed to a warm runner, started for it while round 1
    # and the review ran (docs/warm-starts.md): the stack runs with the default pool.
    assert _event(stack, runs[("implement", 2)], "dispatched")["warm"] is True

    # The repository has both implementer branches (nothing else of this flow), round 2 with
    # the fix and the test the reviewer asked for; its tests pass there.
    branches = _git(demo_repo, "branch", "--list", f"nexus/{fid}-*", "--format=%(refname:short)")
    assert sorted(branches.split()) == [first, second]
    added = _git(demo_repo, "diff", "--name-only", first, second).split()
    assert added == [NEGATIVE_TEST_FILE]
    assert "return a + b" in _git(demo_repo, "show", f"{second}:calc.py")
    checkout = tmp_path / "round2"
    _git(demo_repo, "worktree", "add", "--quiet", str(checkout), second)
    tests = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider"],
        cwd=checkout, capture_output=True, text=True, check=False, timeout=60,
    )  # fmt: skip
    assert tests.returncode == 0, tests.stdout
    assert "3 passed" in tests.stdout
    stack.remember_processes()


@pytest.mark.usefixtures("flows")
def test_a_gate_is_answered_with_nexus_approve(stack: Stack) -> None:
    fid = _start(stack, "e2e_gated", "--input", "the release")
    waiting = _until(stack, fid, "waiting")
    [gate] = waiting["steps"]
    assert (gate["step"], gate["kind"], gate["status"]) == ("ok", "gate", "waiting")
    gate_run, approval = gate["run_id"], gate["approval_id"]
    assert (gate_run, approval) == (f"{fid}-ok-r1", "gate-ok-r1")

    # Listed as any approval, with the flow's requester (the CLI user who ran the flow).
    listed = stack.nexus("approvals", "ls", "-o", "json")
    assert listed.code == 0, listed.stderr
    [row] = [a for a in listed.json()["approvals"] if a["run_id"] == gate_run]
    assert (row["approval_id"], row["tool"], row["summary"]) == (
        approval,
        "flow_gate",
        "Plan the release?",
    )
    assert row["requester"]
    assert stack.nexus("approve", gate_run, "gate-nope").code == 3

    approved = stack.nexus("approve", gate_run, approval, "-m", "ship it")
    assert approved.code == 0, approved.stderr
    again = stack.nexus("approve", gate_run, approval)
    assert again.code == 2
    assert "already decided" in again.stderr

    done = _until(stack, fid, "completed", "failed", "cancelled")
    assert done["status"] == "completed", done
    assert [(s["step"], s["status"]) for s in done["steps"]] == [
        ("ok", "succeeded"),
        ("plan", "succeeded"),
    ]
    assert done["outputs"]["ok"]["approved"] is True
    assert done["outputs"]["ok"]["comment"] == "ship it"
    assert done["outputs"]["plan"]["steps"]
    gone = stack.nexus("approvals", "ls", "-o", "json").json()["approvals"]
    assert gate_run not in [a["run_id"] for a in gone]


@pytest.mark.usefixtures("flows")
def test_cancel_a_running_flow_cancels_its_run(stack: Stack, demo_repo: Path) -> None:
    fid = _start(stack, "e2e_slow", "--repo", str(demo_repo))
    run_id = f"{fid}-work-r1"
    # The run is live: its model asked for the long shell command.
    eventually_blocking(
        lambda: stack.events(run_id),
        lambda evs: any(e["event"] == "tool_called" for e in evs),
        within=RUN_WAIT,
    )
    stack.remember_processes()
    assert _show(stack, fid)["status"] == "running"

    cancelled = stack.nexus("flow", "cancel", fid, "-o", "json")
    assert cancelled.code == 0, cancelled.stderr
    view = _until(stack, fid, "cancelled", "completed", "failed")
    assert (view["status"], view["reason"]) == ("cancelled", "user_requested")
    eventually_blocking(lambda: stack.status(run_id), lambda s: s == "cancelled", within=RUN_WAIT)
    # The run's end is recorded on its step even though the flow had already ended.
    view = eventually_blocking(
        lambda: _show(stack, fid),
        lambda v: v["steps"][0]["status"] != "running",
        within=RUN_WAIT,
    )
    assert [(s["step"], s["status"]) for s in view["steps"]] == [("work", "cancelled")]
    again = stack.nexus("flow", "cancel", fid)
    assert again.code != 0
    assert "already cancelled" in again.stderr
