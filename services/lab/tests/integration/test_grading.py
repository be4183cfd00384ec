"""Grading against core's view of real case runs: a reviewer agent's verdict (its run asked by
the lab, graded when it ends), tools a run must not call (from its events), and golden cases
whose run is unknown or not golden failing with the reason, never the report."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from nexus_core.app import CoreApp
from nexus_events.contract import subjects
from nexus_events.contract.runstate import RunEvent
from nexus_events.events import RunRequested
from nexus_events.events.runs import Origin
from nexus_events.transport.bus import Bus
from nexus_testing import eventually

from nexus_lab.app import LabApp

from .harness import Script, ScriptedRunner, apply_agents, apply_suite, request_eval, wait_report

Labs = Callable[[], Awaitable[LabApp]]
Runners = Callable[[Script], Awaitable[ScriptedRunner]]

SUITE = {
    "id": "reviewed",
    "graders": [{"kind": "reviewer", "agent": "reviewer"}],
    "cases": [
        {"id": "good", "input": "write it well"},
        {"id": "sloppy", "input": "write it anyhow"},
        {"id": "shelly", "input": "no shell", "graders": [
            {"kind": "forbidden_tools", "tools": ["shell"]}]},
        {"id": "lost", "golden": "run-nobody-has"},
    ],
}  # fmt: skip


def script(request: RunRequested) -> dict[str, Any]:
    if "reviews" in request.labels:  # a reviewer's run: approves all but the sloppy case
        verdict = "request_changes" if request.labels["case"] == "sloppy" else "approve"
        return {"verdict": verdict}
    return {"done": True}


async def test_reviewer_forbidden_tools_and_golden_cases(
    bus: Bus, core: CoreApp, labs: Labs, runner: Runners
) -> None:
    await apply_agents(bus, 1)
    await apply_agents(bus, 1, agent_id="reviewer")
    await apply_suite(bus, SUITE)
    scripted = await runner(script)
    # The forbidden call comes past the first page of the run's events (500).
    many = ["read_file"] * 520 + ["shell"]
    scripted.tools = lambda r: many if r.labels.get("case") == "shelly" else []
    await labs()
    await request_eval(bus, "rv", suite="reviewed", agents=["implementer@1"])
    report = await wait_report(bus, "rv", "completed", within=90)

    cells = {c.case: c for c in report.cases}
    assert (cells["good"].trials, cells["good"].passed) == (1, 1)
    assert cells["sloppy"].passed == 0
    assert "reviewer: reviewer reviewer said 'request_changes'" in cells["sloppy"].reasons[0]
    assert cells["shelly"].passed == 0
    assert "forbidden_tools: called shell" in cells["shelly"].reasons[0]
    assert cells["lost"].passed == 0
    assert "golden run run-nobody-has is unknown" in cells["lost"].reasons[0]
    assert report.revisions[0].graded == 4
    assert report.revisions[0].passed == 1

    reviews = {rid: r for rid, r in scripted.requests.items() if "reviews" in r.labels}
    # One reviewer run per completed case run (the golden case never ran), asked by the lab.
    assert len(reviews) == 3
    for rid, review in reviews.items():
        assert review.agent_id == "reviewer"
        assert review.origin == Origin.LAB
        assert rid == f"{review.labels['reviews']}-rv1"  # grader 1, after the implicit one
        assert '"done": true' in review.input
    case_runs = [r for r in scripted.requests.values() if "reviews" not in r.labels]
    assert sorted(r.labels["case"] for r in case_runs) == ["good", "shelly", "sloppy"]


async def test_a_golden_case_whose_run_is_not_golden_fails_with_the_reason(
    bus: Bus, core: CoreApp, labs: Labs, runner: Runners
) -> None:
    await apply_agents(bus, 1)
    scripted = await runner(lambda _: {"done": True})
    # A run that exists but was never marked golden.
    await bus.publish(
        subjects.run_event("plain-run", RunEvent.REQUESTED),
        RunRequested(agent_id="implementer", input="the old task"),
    )
    await scripted_ended(scripted, "plain-run")
    await apply_suite(
        bus,
        {"id": "gold", "cases": [{"id": "old", "golden": "plain-run"},
                                 {"id": "new", "input": "a new task"}]},
    )  # fmt: skip
    await labs()
    await request_eval(bus, "gd", suite="gold", agents=["implementer@1"])
    report = await wait_report(bus, "gd", "completed", within=60)
    cells = {c.case: c for c in report.cases}
    assert cells["old"].passed == 0
    assert "run plain-run is not marked golden" in cells["old"].reasons[0]
    assert cells["new"].passed == 1
    assert [r.labels.get("case") for r in scripted.requests.values()] == [None, "new"]


async def scripted_ended(scripted: ScriptedRunner, run_id: str) -> None:
    await eventually(lambda: _ended(scripted, run_id), what=f"{run_id} ended")


async def _ended(scripted: ScriptedRunner, run_id: str) -> bool:
    return run_id in scripted.ended
