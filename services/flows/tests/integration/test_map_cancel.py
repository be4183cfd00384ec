"""map joins (all, any, quorum) and cancelling a flow mid-way."""

from __future__ import annotations

from typing import Any

import pytest
from nexus_events.contract import subjects
from nexus_events.events import RunRequested
from nexus_events.events.flows import FlowCancelRequested
from nexus_testing import eventually

from .conftest import EnvFactory
from .harness import flow, request_flow, wait_status


def map_flow(join: Any, concurrency: int = 4) -> Any:
    return flow(
        {
            "id": "fan",
            "steps": [
                {"id": "plan", "kind": "run", "agent": "planner"},
                {"id": "each", "kind": "map", "agent": "worker", "over": "plan.files",
                 "input": "work on {{ item }} ({{ index }})", "join": join,
                 "concurrency": concurrency},
                {"id": "after", "kind": "run", "agent": "closer", "input": "{{ each.succeeded }}"},
            ],
        }
    )  # fmt: skip


FILES = ["a", "b", "c", "d"]


async def test_map_all_runs_every_item_within_concurrency(make_env: EnvFactory) -> None:
    live: dict[str, int] = {"now": 0, "most": 0}

    def script(run_id: str, req: RunRequested) -> Any:
        if req.labels["step"] == "plan":
            return {"files": FILES}
        if req.labels["step"] == "each":
            live["now"] += 1
            live["most"] = max(live["most"], live["now"])
            return None  # held; finished below one at a time
        return {"done": True}

    env = await make_env([map_flow("all", concurrency=2)], script)
    await request_flow(env.bus, "m1", "fan")
    for _ in FILES:
        await eventually(lambda: len(env.runner.held), lambda n: n > 0, what="a held item")
        run_id = sorted(env.runner.held)[0]
        live["now"] -= 1
        index = int(env.runner.requests[run_id].labels["item"])
        await env.runner.finish(run_id, {"file": FILES[index]})
    view = await wait_status(env.bus, "m1", "completed")
    assert live["most"] == 2
    assert view.outputs["each"] == {
        "items": [{"file": f} for f in FILES],
        "succeeded": 4,
        "failed": 0,
    }
    assert env.runner.requests["m1-each-r1-i2"].input == "work on c (2)"
    assert env.runner.requests["m1-after-r1"].input == "4"


@pytest.mark.parametrize(("join", "wins"), [("any", 1), ({"quorum": 2}, 2)])
async def test_map_any_and_quorum_cancel_runs_no_longer_needed(
    make_env: EnvFactory, join: Any, wins: int
) -> None:
    def script(run_id: str, req: RunRequested) -> Any:
        if req.labels["step"] == "plan":
            return {"files": FILES}
        if req.labels["step"] == "each":
            return {"ok": True} if int(req.labels["item"]) < wins else None
        return {}

    env = await make_env([map_flow(join)], script)
    await request_flow(env.bus, "m2", "fan")
    view = await wait_status(env.bus, "m2", "completed")
    assert view.outputs["each"]["succeeded"] == wins
    losers = {f"m2-each-r1-i{i}" for i in range(wins, len(FILES))}
    await eventually(
        lambda: {r for r, how in env.runner.finished.items() if how == "cancelled"},
        lambda got: got == losers,
        what="the items no longer needed cancelled",
    )
    items = [s for s in view.steps if s.step == "each" and s.item is not None]
    assert len(items) == len(FILES)


async def test_map_all_fails_when_an_item_fails(make_env: EnvFactory) -> None:
    def script(run_id: str, req: RunRequested) -> Any:
        if req.labels["step"] == "plan":
            return {"files": FILES}
        if req.labels.get("item") == "1":
            return ("fail", "tool_error")
        return {"ok": True}

    env = await make_env([map_flow("all")], script)
    await request_flow(env.bus, "m3", "fan")
    view = await wait_status(env.bus, "m3", "failed")
    assert view.reason == "step_failed"
    assert "each" in view.message


async def test_cancel_mid_flow_cancels_live_runs(make_env: EnvFactory) -> None:
    def script(run_id: str, req: RunRequested) -> Any:
        return {"files": FILES} if req.labels["step"] == "plan" else None

    env = await make_env([map_flow("all", concurrency=3)], script)
    await request_flow(env.bus, "c1", "fan")
    await eventually(lambda: len(env.runner.held), lambda n: n == 3, what="3 live items")
    await env.bus.publish(
        subjects.flow_event("c1", "cancel_requested"), FlowCancelRequested(requested_by="dave")
    )
    view = await wait_status(env.bus, "c1", "cancelled")
    assert view.reason == "user_requested"
    await eventually(
        lambda: sorted(r for r, how in env.runner.finished.items() if how == "cancelled"),
        lambda got: got == ["c1-each-r1-i0", "c1-each-r1-i1", "c1-each-r1-i2"],
        what="every live run cancelled",
    )
    # Nothing new starts after the cancel.
    assert "c1-each-r1-i3" not in env.runner.requests
