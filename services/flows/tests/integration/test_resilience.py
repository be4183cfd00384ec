"""Restarts, rebuilds, poison and queries: the properties the design exists for."""

from __future__ import annotations

import asyncio
import json
from dataclasses import replace
from typing import Any

from nexus_events.contract import subjects
from nexus_events.contract.streams import FLOWS, RUNS
from nexus_events.events import RunRequested
from nexus_events.transport.projection import rebuild
from nexus_testing import dead_letters, eventually

from nexus_flows.store import FlowsProjection

from .conftest import Env, EnvFactory
from .harness import feature_flow, request_flow, stored_requests, wait_status
from .test_feature_flow import reviewer_asks_once


async def rows(env: Env) -> tuple[list[Any], list[Any]]:
    runs = await env.pool.fetch(
        "SELECT flow_run_id, flow, status, task_id, first_seq, requested_at, updated_at, state"
        " FROM flows.flow_runs ORDER BY flow_run_id"
    )
    steps = await env.pool.fetch(
        "SELECT * FROM flows.flow_steps ORDER BY flow_run_id, step, round, item"
    )
    return [tuple(r) for r in runs], [tuple(r) for r in steps]


async def test_restart_mid_flow_requests_no_run_twice_and_loses_none(
    make_env: EnvFactory,
) -> None:
    inner = reviewer_asks_once()
    hold = {"on": True}

    def script(run_id: str, req: RunRequested) -> Any:
        if req.labels["step"] == "implement" and hold["on"]:
            return None
        return inner(run_id, req)

    env = await make_env([feature_flow()], script)
    await request_flow(env.bus, "r1", "feature", input="x")
    await eventually(lambda: env.runner.held, lambda h: h == {"r1-implement-r1"}, what="held")
    await env.restart()  # the new app finds r1's live step run requested in NEXUS_RUNS
    await request_flow(env.bus, "r2", "feature", input="y")  # arrives while restarted
    await eventually(lambda: env.runner.held, lambda h: len(h) == 2, what="both held")
    assert env.runner.asked["r1-implement-r1"] == 1  # r1 was stepped before r2 was
    hold["on"] = False
    for run_id in sorted(env.runner.held):
        await env.runner.finish(run_id, {"_branch": "b"})
    await wait_status(env.bus, "r1", "completed")
    await wait_status(env.bus, "r2", "completed")
    assert len(env.runner.started) == len(set(env.runner.started)) == 12
    assert set(env.runner.asked) == set(env.runner.started)
    assert set((await stored_requests(env.bus)).values()) == {1}


async def test_restart_after_the_duplicate_window_stores_no_second_request(
    make_env: EnvFactory,
) -> None:
    """Past NEXUS_RUNS' duplicate window JetStream would store a repeated request again, so a
    restarted service must not repeat one the stream holds (issue 36 defect 3). The window is
    made 1 s here instead of waiting the default 2 min out."""
    inner = reviewer_asks_once()
    hold = {"on": True}

    def script(run_id: str, req: RunRequested) -> Any:
        if req.labels["step"] == "implement" and hold["on"]:
            return None
        return inner(run_id, req)

    env = await make_env([feature_flow()], script)
    runs = await env.bus.js.stream_info(RUNS)
    await env.bus.js.update_stream(replace(runs.config, duplicate_window=1.0))
    await request_flow(env.bus, "r1", "feature", input="x")
    await eventually(lambda: env.runner.held, lambda h: h == {"r1-implement-r1"}, what="held")
    await asyncio.sleep(1.5)  # the first request's message id is out of the window now
    await env.restart()
    # r2 is stepped after r1 (the restarted engine steps the live flows it found first): once
    # r2's run is requested, r1's has been reconciled.
    await request_flow(env.bus, "r2", "feature", input="y")
    await eventually(lambda: env.runner.held, lambda h: len(h) == 2, what="both held")
    stored_now = await stored_requests(env.bus)
    assert stored_now["r1-implement-r1"] == stored_now["r2-implement-r1"] == 1, stored_now
    hold["on"] = False
    for run_id in sorted(env.runner.held):
        await env.runner.finish(run_id, {"_branch": "b"})
    await wait_status(env.bus, "r1", "completed")
    await wait_status(env.bus, "r2", "completed")
    assert env.runner.asked["r1-implement-r1"] == 1
    assert set((await stored_requests(env.bus)).values()) == {1}


async def test_rebuild_gives_the_live_rows(make_env: EnvFactory) -> None:
    env = await make_env([feature_flow()], reviewer_asks_once())
    await request_flow(env.bus, "b1", "feature", input="x", task_id="T9")
    await wait_status(env.bus, "b1", "completed")
    await request_flow(env.bus, "b2", "nope")
    await wait_status(env.bus, "b2", "failed")
    live = await rows(env)
    assert len(live[1]) == 6
    applied = await rebuild(env.bus, env.pool, FlowsProjection())
    assert applied == (await env.bus.js.stream_info(FLOWS)).state.messages
    assert await rows(env) == live


async def test_malformed_flow_events_are_dead_lettered_and_the_service_goes_on(
    make_env: EnvFactory,
) -> None:
    env = await make_env([feature_flow()], reviewer_asks_once())
    await env.bus.js.publish(subjects.flow_event("bad", "step_started"), b"{not json")
    await env.bus.js.publish(
        subjects.flow_event("bad", "step_finished"), json.dumps({"step": "UPPER"}).encode()
    )
    letters = await eventually(
        lambda: dead_letters(env.bus),
        lambda ls: len([x for x in ls if x.subject.startswith("nexus.flow.v1.bad")]) == 2,
        what="two dead letters",
    )
    assert all(x.service for x in letters)
    await request_flow(env.bus, "ok1", "feature", input="x")
    await wait_status(env.bus, "ok1", "completed")
    assert env.app.ready()


async def test_queries_list_and_bad_requests(make_env: EnvFactory) -> None:
    env = await make_env([feature_flow()], reviewer_asks_once())
    for fid in ("q1", "q2", "q3"):
        await request_flow(env.bus, fid, "feature", input="x", task_id="T1")
    for fid in ("q1", "q2", "q3"):
        await wait_status(env.bus, fid, "completed")

    async def ask(subject: str, body: bytes) -> dict[str, Any]:
        reply = await env.bus.nc.request(subject, body, timeout=5)
        return dict(json.loads(reply.data))

    page = await ask(subjects.FLOWS_LIST, b'{"limit": 2, "status": "completed"}')
    assert [f["flow_run_id"] for f in page["flows"]] == ["q3", "q2"]
    rest = await ask(subjects.FLOWS_LIST, json.dumps({"cursor": page["next_cursor"]}).encode())
    assert [f["flow_run_id"] for f in rest["flows"]] == ["q1"]
    assert rest["next_cursor"] is None
    bad = await ask(subjects.FLOWS_LIST, b'{"limit": 0}')
    assert bad["error"]["code"] == 400
    missing = await ask(subjects.FLOWS_GET, b'{"flow_run_id": "zz"}')
    assert missing["error"]["code"] == 404
    garbage = await ask(subjects.FLOWS_GET, b"[1, 2")
    assert garbage["error"]["code"] == 400
    assert env.app.ready()
