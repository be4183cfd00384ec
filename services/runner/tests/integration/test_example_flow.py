"""The example flow's agents (examples/agents, as examples/flows/feature.yaml runs them) on the
real runner against the offline scripted model, one step after the other as the flows service
starts them: step run ids, each step on the branch the previous one pushed. Every finish has
to fit the agent's output_schema, the reviewer asks for changes once, the tester reports."""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from nexus_cli.devstack import offline_model as om
from nexus_events.contract.documents import parse_agent
from nexus_events.events.flows import step_run_id
from nexus_events.events.runs import RunCompleted, RunConfig, RunResult
from nexus_events.transport.bus import Bus

from nexus_runner.app import execute_run
from nexus_runner.config import RunnerSettings

from .conftest import git

EXAMPLES = Path(__file__).resolve().parents[4] / "examples"
FLOW = "fl-example"


@pytest.fixture
async def offline_model() -> AsyncIterator[str]:
    server = om.Server(chunk_delay=0)
    srv = await asyncio.start_server(server.handle, "127.0.0.1", 0)
    async with srv:
        yield f"http://127.0.0.1:{srv.sockets[0].getsockname()[1]}/v1"


@pytest.fixture
def demo_remote(tmp_path: Path) -> Path:
    """A bare repository holding examples/demo-repo (add() subtracts; test_add fails)."""
    src = tmp_path / "demo-src"
    shutil.copytree(EXAMPLES / "demo-repo", src)
    git(src, "init", "-q", "-b", "main")
    git(src, "add", "-A")
    git(src, "commit", "-q", "-m", "demo")
    bare = tmp_path / "demo.git"
    git(tmp_path, "clone", "-q", "--bare", str(src), str(bare))
    return bare


async def _step(
    bus: Bus,
    settings: RunnerSettings,
    base_url: str,
    remote: Path,
    agent_id: str,
    step: str,
    round_: int,
    task: str,
    ref: str | None = None,
) -> RunResult:
    agent = parse_agent((EXAMPLES / "agents" / f"{agent_id}.yaml").read_text())
    body: dict[str, Any] = agent.model_dump(
        include={"system_prompt", "tools", "permissions", "budgets", "output_schema"}
    )
    config = RunConfig.model_validate(
        body
        | {
            "run_id": step_run_id(FLOW, step, round_),
            "agent_id": agent.id,
            "input": task,
            "model": {"name": agent.model.name, "base_url": base_url},
            "repo": {"url": str(remote), "ref": ref},
        }
    )
    terminal = await execute_run(config, settings, bus)
    assert isinstance(terminal, RunCompleted), terminal
    return terminal.result


async def test_plan_implement_review_twice_then_test(
    runner_bus: Bus, settings: RunnerSettings, offline_model: str, demo_remote: Path
) -> None:
    # The detected command without the workspace's pytest plugins: ~2 s less per test run.
    fast = settings.model_copy(
        update={"acceptance_command": "PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 python -m pytest -q"}
    )

    async def step(
        agent: str, step: str, round_: int, task: str, ref: str | None = None
    ) -> RunResult:
        return await _step(
            runner_bus, fast, offline_model, demo_remote, agent, step, round_, task, ref
        )

    # The planner reads main, whose tests fail: its run still completes (it changes nothing).
    plan = await step("planner", "plan", 1, "Plan this task: fix the failing test")
    assert plan.details["steps"] == om.PLAN_STEPS
    assert plan.acceptance is not None
    assert plan.acceptance["passed"] is False

    first = await step("implementer", "implement", 1, f"Implement the plan: {om.PLAN_STEPS}")
    assert first.pushed is True
    assert first.branch == f"nexus/{FLOW}-implement-r1"
    review = await step(
        "reviewer", "review", 1, f"Review branch {first.branch} against the plan", first.branch
    )
    assert review.details["verdict"] == "request_changes"
    assert review.details["findings"] == [om.REVIEW_FINDING]

    asked = f"Implement the plan: {om.PLAN_STEPS}\nThe reviewer asked for these changes: "
    second = await step(
        "implementer", "implement", 2, asked + str(review.details["findings"]), first.branch
    )
    assert second.pushed is True
    assert second.branch == f"nexus/{FLOW}-implement-r2"
    assert second.tests_passed is True
    shown = git(demo_remote, "show", f"{second.branch}:{om.NEGATIVE_TEST_FILE}")
    assert "test_add_negative" in shown
    assert "return a + b" in git(demo_remote, "show", f"{second.branch}:calc.py")

    review = await step(
        "reviewer", "review", 2, f"Review branch {second.branch} against the plan", second.branch
    )
    assert review.details["verdict"] == "approve"

    tested = await step("tester", "test", 1, f"Test branch {second.branch}.", second.branch)
    assert tested.details["passed"] is True
    assert tested.tests_passed is True
    assert tested.pushed is False
