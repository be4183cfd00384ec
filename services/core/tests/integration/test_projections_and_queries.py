"""agent_runs and board follow the streams; queries answer from them; restart and rebuild
give the rows of an uninterrupted run."""

from __future__ import annotations

import json
from typing import Any

import asyncpg
from nexus_events.contract import subjects
from nexus_events.contract.streams import RUNS, TASKS
from nexus_events.events import (
    Column,
    RunCompleted,
    RunDispatched,
    RunResult,
    RunStarted,
    RunTurn,
    TaskCreated,
    TaskMoved,
)
from nexus_events.transport.bus import Bus, Outgoing
from nexus_events.transport.catalog_commands import apply_agent, apply_skill
from nexus_events.transport.projection import rebuild

from nexus_core.app import CoreApp
from nexus_core.board_projection import BoardProjection
from nexus_core.runs_projection import AgentRunsProjection

from .conftest import core_settings
from .support import AGENT_YAML, SKILL_MD, catalog_ready, event_names, eventually, query

RAW = {"agent_id": "implementer", "task_id": "T-1", "input": "fix the bug"}


async def _drive(bus: Bus, run_id: str, *, tokens: int = 5) -> None:
    """What scheduler and runner would publish after `prepared`."""
    await bus.publish_many([
        Outgoing(subjects.run_event(run_id, "dispatched"),
                 RunDispatched(runtime="local", handle=f"pid-{run_id}")),
        Outgoing(subjects.run_event(run_id, "started"), RunStarted(runner="host")),
        Outgoing(subjects.run_event(run_id, "turn"), RunTurn(turn=1, tokens_in=tokens,
                                                              tokens_out=2, cost_usd=0.5)),
        Outgoing(subjects.run_event(run_id, "completed"),
                 RunCompleted(result=RunResult(summary="fixed", pr_url="http://pr/1"))),
    ])  # fmt: skip


async def _stream_end(bus: Bus, stream: str) -> int:
    return (await bus.js.stream_info(stream)).state.last_seq


async def _caught_up(core: CoreApp, bus: Bus) -> None:
    runs, tasks = await _stream_end(bus, RUNS), await _stream_end(bus, TASKS)
    assert core.views_runner is not None
    await core.views_runner.wait_until(RUNS, runs)
    await core.views_runner.wait_until(TASKS, tasks)


async def test_end_to_end_apply_request_drive_query(bus: Bus, core: CoreApp):
    await apply_agent(bus, AGENT_YAML)
    await apply_skill(bus, SKILL_MD)
    await catalog_ready(core)
    await bus.publish(
        subjects.task_event("T-1", "created"), TaskCreated(title="Fix", column=Column.TODO)
    )
    await bus.js.publish(subjects.run_event("r1", "requested"), json.dumps(RAW).encode())
    await eventually(lambda: event_names(bus, "r1"), lambda names: "prepared" in names)
    await _drive(bus, "r1")
    await _caught_up(core, bus)

    error, run = await query(bus, subjects.CORE_RUNS_GET, {"run_id": "r1"})
    assert error is None
    assert (run["status"], run["reason"], run["agent_id"], run["task_id"]) == (
        "completed",
        "succeeded",
        "implementer",
        "T-1",
    )
    assert run["catalog_revisions"] == {"agent/implementer": 1, "skill/python": 1}
    assert run["runtime_handle"] == "pid-r1"
    assert (run["tokens_in"], run["tokens_out"], run["cost_usd"]) == (5, 2, 0.5)
    assert run["result"]["summary"] == "fixed"
    assert set(run["phases"]) == {"requested", "prepared", "dispatched", "started"}
    assert run["phases"]["requested"] <= run["phases"]["started"] <= run["ended_at"]

    error, board = await query(bus, subjects.CORE_BOARD_GET)
    assert error is None
    [task] = board["tasks"]
    assert (task["task_id"], task["title"], task["column"]) == ("T-1", "Fix", "review")
    assert task["current_run"] == {"run_id": "r1", "status": "completed", "attempt": 1}

    # A second run on the same task becomes current; the first one is past.
    await bus.js.publish(subjects.run_event("r2", "requested"), json.dumps(RAW).encode())
    await eventually(lambda: event_names(bus, "r2"), lambda names: "prepared" in names)
    await _caught_up(core, bus)
    _, board = await query(bus, subjects.CORE_BOARD_GET, {"column": "in_progress"})
    [task] = board["tasks"]
    assert task["current_run"] == {"run_id": "r2", "status": "prepared", "attempt": 1}
    assert task["past_runs"] == [{"run_id": "r1", "status": "completed", "attempt": 1}]
    # The operator moves it; the later manual move wins over the run's column.
    await bus.publish(subjects.task_event("T-1", "moved"), TaskMoved(column=Column.BACKLOG))
    await _caught_up(core, bus)
    _, board = await query(bus, subjects.CORE_BOARD_GET)
    assert board["tasks"][0]["column"] == "backlog"

    _, listed = await query(bus, subjects.CORE_RUNS_LIST, {"limit": 1})
    assert [r["run_id"] for r in listed["runs"]] == ["r2"]
    _, page2 = await query(
        bus, subjects.CORE_RUNS_LIST, {"limit": 1, "cursor": listed["next_cursor"]}
    )
    assert [r["run_id"] for r in page2["runs"]] == ["r1"]
    assert page2["next_cursor"] is None
    _, done = await query(
        bus, subjects.CORE_RUNS_LIST, {"status": "completed", "agent_id": "implementer"}
    )
    assert [r["run_id"] for r in done["runs"]] == ["r1"]
    _, events = await query(bus, subjects.CORE_RUNS_EVENTS, {"run_id": "r1"})
    assert [e["event"] for e in events["events"]] == [
        "requested",
        "prepared",
        "dispatched",
        "started",
        "turn",
        "completed",
    ]

    _, agents = await query(bus, subjects.CORE_CATALOG_AGENTS_LIST)
    assert [a["definition"]["id"] for a in agents["agents"]] == ["implementer"]
    _, agent = await query(bus, subjects.CORE_CATALOG_AGENTS_GET, {"id": "implementer"})
    assert agent["revision"] == 1
    _, skill = await query(
        bus, subjects.CORE_CATALOG_SKILLS_GET, {"name": "python", "version": "1.0.0"}
    )
    assert skill["skill"]["content"] == "# Python\nUse uv."
    _, skills = await query(bus, subjects.CORE_CATALOG_SKILLS_LIST)
    assert len(skills["skills"]) == 1


async def test_bad_queries_get_structured_errors(bus: Bus, core: CoreApp):
    error, body = await query(bus, subjects.CORE_RUNS_GET, {"run": "x"})
    assert error == "400"
    assert {f["loc"] for f in body["error"]["fields"]} == {"run_id", "run"}
    error, body = await query(bus, subjects.CORE_RUNS_GET, {"run_id": "nope"})
    assert (error, body["error"]["code"]) == ("404", 404)
    error, body = await query(bus, subjects.CORE_RUNS_LIST, {"cursor": "abc"})
    assert error == "400"
    msg = await bus.nc.request(subjects.CORE_BOARD_GET, b"not json", timeout=5)
    assert msg.headers is not None
    assert msg.headers["Nats-Service-Error-Code"] == "400"
    error, _ = await query(bus, subjects.CORE_CATALOG_AGENTS_GET, {"id": "ghost"})
    assert error == "404"
    error, _ = await query(bus, subjects.CORE_RUNS_EVENTS, {"run_id": "a.b"})
    assert error == "400"


async def _publish_runs(bus: Bus, start: int, count: int) -> None:
    for i in range(start, start + count):
        run_id = f"x{i}"
        task = f"T-{i % 3}"
        await bus.js.publish(
            subjects.run_event(run_id, "requested"), json.dumps({**RAW, "task_id": task}).encode()
        )
        if i % 2:
            await _drive(bus, run_id, tokens=i)


async def _rows(pool: asyncpg.Pool[Any]) -> tuple[list[Any], list[Any]]:
    runs = await pool.fetch("SELECT * FROM core_agent_runs.agent_runs ORDER BY run_id")
    tasks = await pool.fetch("SELECT * FROM core_board.tasks ORDER BY task_id")
    return [dict(r) for r in runs], [dict(r) for r in tasks]


async def test_restart_mid_stream_and_rebuild_equal_live(bus: Bus, core_pool: asyncpg.Pool[Any]):
    settings = core_settings()
    async with CoreApp(settings, bus=bus, pool=core_pool) as core:
        await apply_agent(bus, AGENT_YAML)
        await apply_skill(bus, SKILL_MD)
        await catalog_ready(core)
        for t in range(3):
            await bus.publish(subjects.task_event(f"T-{t}", "created"), TaskCreated(title=f"t{t}"))
        await _publish_runs(bus, 0, 6)
    # Core is down: requests and run events keep coming.
    await _publish_runs(bus, 6, 6)
    async with CoreApp(settings, bus=bus, pool=core_pool) as core:

        async def prepared_count() -> int:
            f = subjects.run_events_filter(None, "prepared")
            return len([d async for d in bus.replay(RUNS, filter_subject=f)])

        await eventually(prepared_count, lambda n: n == 12)
        await _caught_up(core, bus)
        live = await _rows(core_pool)
        assert len(live[0]) == 12
        assert {r["status"] for r in live[0]} == {"prepared", "completed"}
        await rebuild(bus, core_pool, AgentRunsProjection())
        await rebuild(bus, core_pool, BoardProjection())
        rebuilt = await _rows(core_pool)
    assert rebuilt == live
    # Each prepared exactly once despite the restart.
    for i in range(12):
        assert (await event_names(bus, f"x{i}")).count("prepared") == 1


async def test_runs_list_filters_and_runs_events_from_a_sequence(bus: Bus, core: CoreApp):
    await apply_agent(bus, AGENT_YAML)
    await apply_skill(bus, SKILL_MD)
    await catalog_ready(core)
    for run_id, task_id, origin in (("q1", "T-a", "cli"), ("q2", "T-b", "plane")):
        body = {**RAW, "task_id": task_id, "origin": origin}
        await bus.js.publish(subjects.run_event(run_id, "requested"), json.dumps(body).encode())
        await eventually(lambda r=run_id: event_names(bus, r), lambda n: "prepared" in n)
    _, first = await query(bus, subjects.CORE_RUNS_GET, {"run_id": "q2"})
    await bus.js.publish(subjects.run_event("q3", "requested"), json.dumps(RAW).encode())
    await eventually(lambda: event_names(bus, "q3"), lambda n: "prepared" in n)
    await _drive(bus, "q1")
    await _caught_up(core, bus)

    async def listed(**filters: Any) -> list[str]:
        error, body = await query(bus, subjects.CORE_RUNS_LIST, filters)
        assert error is None, body
        return [r["run_id"] for r in body["runs"]]

    assert await listed(origin="plane") == ["q2"]
    assert await listed(task_id="T-a") == ["q1"]
    assert await listed(origin="nats", status="prepared") == ["q3"]
    assert await listed(since=first["phases"]["requested"]) == ["q3", "q2"]
    assert await listed(agent_id="implementer", limit=2) == ["q3", "q2"]

    _, everything = await query(bus, subjects.CORE_RUNS_EVENTS, {"run_id": "q1"})
    seqs = [e["seq"] for e in everything["events"]]
    assert seqs == sorted(seqs)
    assert len(seqs) == 6  # requested, prepared, dispatched, started, turn, completed
    _, tail = await query(bus, subjects.CORE_RUNS_EVENTS, {"run_id": "q1", "from_seq": seqs[3]})
    assert [e["seq"] for e in tail["events"]] == seqs[3:]
    assert [e["event"] for e in tail["events"]] == ["started", "turn", "completed"]
    _, page = await query(bus, subjects.CORE_RUNS_EVENTS, {"run_id": "q1", "limit": 2})
    assert [e["seq"] for e in page["events"]] == seqs[:2]
