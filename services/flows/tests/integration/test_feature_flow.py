"""The example flow end to end: plan, implement, a reviewer asking for changes once, then
approving, then test."""

from __future__ import annotations

from typing import Any

from nexus_events.events import RunRequested

from .conftest import EnvFactory
from .harness import feature_flow, request_flow, stored_requests, wait_status


def reviewer_asks_once() -> Any:
    """A script: the reviewer asks for changes once per flow run, then approves."""
    reviews: dict[str, int] = {}

    def script(run_id: str, req: RunRequested) -> Any:
        step = req.labels["step"]
        if step == "plan":
            return {"steps": ["add button", "wire it"]}
        if step == "implement":
            return {"_branch": "feat/button"}
        if step == "review":
            fid = req.labels["flow_run_id"]
            reviews[fid] = reviews.get(fid, 0) + 1
            if reviews[fid] == 1:
                return {"verdict": "request_changes", "findings": ["name it better"]}
            return {"verdict": "approve"}
        return {"passed": True}

    return script


async def test_feature_flow_loops_once_then_completes(make_env: EnvFactory) -> None:
    env = await make_env([feature_flow()], reviewer_asks_once())
    await request_flow(
        env.bus, "f1", "feature", task_id="T1", input="add a button", requested_by="alice"
    )
    view = await wait_status(env.bus, "f1", "completed")
    steps = [(s.step, s.round, s.status) for s in view.steps]
    assert steps == [
        ("plan", 1, "succeeded"),
        ("implement", 1, "succeeded"),
        ("review", 1, "succeeded"),
        ("implement", 2, "succeeded"),
        ("review", 2, "succeeded"),
        ("test", 1, "succeeded"),
    ]
    assert view.outputs["review"] == {"verdict": "approve"}
    reqs = env.runner.requests
    # Templates render the flow's input, earlier outputs and the last review's findings.
    assert reqs["f1-plan-r1"].input == "Plan this task: add a button"
    assert "name it better" in reqs["f1-implement-r2"].input
    assert "name it better" not in reqs["f1-implement-r1"].input
    assert reqs["f1-review-r2"].input.startswith("Review branch feat/button")
    assert reqs["f1-test-r1"].labels == {
        "flow_run_id": "f1",
        "flow": "feature",
        "step": "test",
        "round": "1",
    }
    assert reqs["f1-test-r1"].task_id == "T1"
    assert reqs["f1-test-r1"].requested_by == "alice"
    # Each step run was requested (and stored) exactly once.
    assert await stored_requests(env.bus) == dict.fromkeys(reqs, 1)


async def test_unknown_flow_fails(make_env: EnvFactory) -> None:
    env = await make_env([feature_flow()], lambda run_id, req: {})
    await request_flow(env.bus, "f2", "nope")
    view = await wait_status(env.bus, "f2", "failed")
    assert view.reason == "unknown_flow"
    assert env.runner.requests == {}


async def test_step_runs_carry_the_flow_runs_team_else_the_flows(make_env: EnvFactory) -> None:
    """docs/spend.md, "Teams": None leaves core to take the task's or the agent's."""
    teamed = feature_flow().model_copy(update={"id": "feature-team", "team": "flowteam"})
    # examples/flows/feature.yaml names team alpha: the flow without a team is a copy.
    teamless = feature_flow().model_copy(update={"team": None})
    env = await make_env([teamless, teamed], reviewer_asks_once())
    await request_flow(env.bus, "ft1", "feature-team", input="x", team="asked")
    await request_flow(env.bus, "ft2", "feature-team", input="x")
    await request_flow(env.bus, "ft3", "feature", input="x")
    for fid in ("ft1", "ft2", "ft3"):
        await wait_status(env.bus, fid, "completed")
    teams = {
        fid: {r.team for r in env.runner.requests.values() if r.labels["flow_run_id"] == fid}
        for fid in ("ft1", "ft2", "ft3")
    }
    assert teams == {"ft1": {"asked"}, "ft2": {"flowteam"}, "ft3": {None}}
