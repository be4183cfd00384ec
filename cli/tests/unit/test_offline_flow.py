"""The offline model scripts the example flow's agents (examples/flows/feature.yaml) as the
runner talks to them, and what they finish with fits examples/agents' output schemas."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from jsonschema import Draft202012Validator
from nexus_events.contract.documents import parse_agent
from nexus_events.events import AgentDefinition

from nexus_cli.devstack import offline_model as om

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
AGENTS = {p.stem: parse_agent(p.read_text()) for p in sorted((EXAMPLES / "agents").glob("*.yaml"))}
FLOW = "fl-7f3a"


def _tools(agent: AgentDefinition) -> list[dict[str, Any]]:
    names = [g.name for g in agent.tools] + ["finish"]  # the runner always grants finish
    return [{"type": "function", "function": {"name": n, "parameters": {}}} for n in names]


def _walk(
    agent_id: str, run_id: str, task: str, tool_output: str = "ok"
) -> tuple[list[str], dict[str, Any]]:
    """Talk to the offline model as the runner does with the example agent `agent_id` (its
    system prompt, the branch note, the task) until it finishes; (tools called, finish args)."""
    agent = AGENTS[agent_id]
    note = f"## Working rules\nYou work in a git checkout on branch nexus/{run_id}."
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": f"{agent.system_prompt.strip()}\n\n{note}"},
        {"role": "user", "content": task},
    ]
    called: list[str] = []
    for _ in range(20):
        body = {"model": agent.model.name, "messages": messages, "tools": _tools(agent)}
        reply = om.reply_for(body)
        assert len(reply.calls) == 1, reply
        call = reply.calls[0]
        called.append(call.name)
        if call.name == "finish":
            return called, call.arguments
        messages.append({"role": "assistant", "content": reply.text, "tool_calls": []})
        messages.append({"role": "tool", "tool_call_id": str(len(called)), "content": tool_output})
    raise AssertionError(f"{agent_id} never finished: {called}")


def _fits(agent_id: str, details: dict[str, Any]) -> None:
    schema = AGENTS[agent_id].output_schema
    assert schema is not None
    errors = [e.message for e in Draft202012Validator(schema).iter_errors(details)]
    assert errors == [], errors


def test_the_example_agents_declare_valid_output_schemas() -> None:
    assert {"planner", "implementer", "reviewer", "tester"} <= set(AGENTS)
    assert AGENTS["tester"].role == "tester"
    for agent_id in ("planner", "reviewer", "tester"):
        schema = AGENTS[agent_id].output_schema
        assert schema is not None, agent_id
        Draft202012Validator.check_schema(schema)
    reviewer = Draft202012Validator(AGENTS["reviewer"].output_schema or {})
    assert not reviewer.is_valid({"verdict": "comment"})  # only the flow's two verdicts
    assert not Draft202012Validator(AGENTS["tester"].output_schema or {}).is_valid({})
    # The implementer leaves its work where the reviewer and the tester can read it.
    assert AGENTS["implementer"].permissions.can_commit
    assert AGENTS["implementer"].permissions.can_push


def test_script_follows_the_example_agents_role() -> None:
    def body(agent_id: str, task: str = "go") -> dict[str, Any]:
        system = {"role": "system", "content": AGENTS[agent_id].system_prompt}
        return {"model": "gpt-4o-mini", "messages": [system, {"role": "user", "content": task}]}

    assert [om.script_name(body(a)) for a in ("planner", "implementer", "reviewer", "tester")] == [
        "planner",
        "fix",
        "reviewer",
        "tester",
    ]
    assert om.script_name(body("reviewer", "[offline-model:slow] wait")) == "slow"


def test_planner_finishes_with_steps() -> None:
    called, finish = _walk("planner", f"{FLOW}-plan-r1", "Plan this task: fix calc")
    assert called == ["list_files", "read_file", "finish"]
    assert finish["details"] == {"steps": om.PLAN_STEPS}
    _fits("planner", finish["details"])


def test_reviewer_asks_for_changes_in_round_one_and_approves_in_round_two() -> None:
    first = f"Review branch nexus/{FLOW}-implement-r1 against the plan: {om.PLAN_STEPS}"
    called, finish = _walk("reviewer", f"{FLOW}-review-r1", first)
    assert called == ["list_files", "read_file", "finish"]
    assert finish["details"] == {"verdict": "request_changes", "findings": [om.REVIEW_FINDING]}
    _fits("reviewer", finish["details"])
    second = f"Review branch nexus/{FLOW}-implement-r2 against the plan: {om.PLAN_STEPS}"
    _, finish = _walk("reviewer", f"{FLOW}-review-r2", second)
    assert finish["details"] == {"verdict": "approve", "findings": []}
    _fits("reviewer", finish["details"])
    # The same request, asked again (a retry, a restarted runner): the same verdict.
    assert _walk("reviewer", f"{FLOW}-review-r2", second)[1] == finish


def test_flow_round_reads_step_run_ids() -> None:
    assert om.flow_round("Review branch nexus/fl-1-implement-r1") == 1
    assert om.flow_round("branch nexus/fl-1-implement-r3 and nexus/fl-1-review-r2") == 3
    assert om.flow_round("map item nexus/fl-1-fan-r2-i4") == 2
    assert om.flow_round("no flow here, r2d2 -r2x") == 1


def test_tester_reports_whether_the_tests_passed() -> None:
    called, finish = _walk("tester", f"{FLOW}-test-r1", "Test branch x.", "2 passed\n[exit code 0]")
    assert called == ["run_tests", "finish"]
    assert finish["details"] == {"passed": True}
    _fits("tester", finish["details"])
    _, failing = _walk("tester", f"{FLOW}-test-r1", "Test branch x.", "1 failed\n[exit code 1]")
    assert failing["details"] == {"passed": False}
    _fits("tester", failing["details"])


def test_implementer_adds_the_requested_test_in_round_two(tmp_path: Path) -> None:
    granted = {g.name for g in AGENTS["implementer"].tools} | {"finish"}
    plain, _ = _walk("implementer", f"{FLOW}-implement-r1", f"Implement the plan: {om.PLAN_STEPS}")
    assert "write_file" not in plain
    asked = (
        f"Implement the plan: {om.PLAN_STEPS}\n"
        f"The reviewer asked for these changes: {[om.REVIEW_FINDING]}"
    )
    called, finish = _walk("implementer", f"{FLOW}-implement-r2", asked)
    assert set(called) <= granted
    assert called.count("write_file") == 1
    assert finish["details"]["files"] == [om.BUG_FILE, om.NEGATIVE_TEST_FILE]
    # What round 2 leaves behind passes the demo repo's tests (the reviewer's test included).
    repo = tmp_path / "demo-repo"
    shutil.copytree(EXAMPLES / "demo-repo", repo)
    calc = repo / om.BUG_FILE
    calc.write_text(calc.read_text().replace(om.BUG_OLD, om.BUG_NEW))
    (repo / om.NEGATIVE_TEST_FILE).write_text(om.NEGATIVE_TEST)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", str(repo)],
        cwd=repo,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "3 passed" in done.stdout
