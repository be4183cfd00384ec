"""Many flow runs in one engine pass: the catalog asked once per flow asked for, every run of
every flow requested exactly once, an unknown flow failing beside them."""

from __future__ import annotations

from typing import Any

from nexus_events.contract import subjects
from nexus_events.events.flows import FlowRequested
from nexus_events.events.runs import RunRequested
from nexus_events.transport.publish import Outgoing

from .conftest import EnvFactory
from .harness import flow, stored_requests, wait_status

BURST = 20


def two_steps() -> Any:
    return flow(
        {
            "id": "pair",
            "steps": [
                {"id": "first", "kind": "run", "agent": "a", "input": "{{ input }}"},
                {"id": "second", "kind": "run", "agent": "a", "input": "{{ input }}"},
            ],
        }
    )


def done(run_id: str, req: RunRequested) -> dict[str, Any]:
    return {"ok": True}


async def test_a_burst_asks_the_catalog_once_per_flow_and_requests_each_run_once(
    make_env: EnvFactory,
) -> None:
    env = await make_env([two_steps()], done)
    # Requested while the service is down: the restarted projection reads them all in its
    # catch-up (one batch, two at most), so one engine pass accepts them together.
    await env.app.stop()
    ids = [f"burst-{i}" for i in range(BURST)]
    await env.bus.publish_many(
        [
            *(
                Outgoing(subjects.flow_event(fid, "requested"), FlowRequested(flow="pair"))
                for fid in ids
            ),
            Outgoing(subjects.flow_event("burst-unknown", "requested"), FlowRequested(flow="no")),
        ]
    )
    asked_before = env.catalog.asked
    await env.restart()
    for fid in ids:
        # 40 runs through a restart: generous on a loaded machine; a stall still fails, and
        # says whether the step runs had ended (the fake runner's side) or not.
        await wait_status(
            env.bus,
            fid,
            "completed",
            within=60,
            detail=lambda: f"runs ended: {sorted(env.runner.finished.items())}",
        )
    failed = await wait_status(env.bus, "burst-unknown", "failed")
    assert failed.reason == "unknown_flow"
    # One question per flow asked for in a pass ("pair" and "no"); asked per flow run, the
    # burst would have asked BURST + 1 times.
    assert env.catalog.asked - asked_before <= 4
    runs = {f"{fid}-{step}-r1" for fid in ids for step in ("first", "second")}
    stored = await stored_requests(env.bus)
    assert {run: n for run, n in stored.items() if run.startswith("burst-")} == dict.fromkeys(
        runs, 1
    )
    assert set(env.runner.requests) == runs
