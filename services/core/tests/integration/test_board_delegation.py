"""Delegated child runs on the board: a child shares its parent's task, yet the task's row
keeps its own (root) run as the current run and column and lists the children beside it; any
interleaving of NEXUS_TASKS and NEXUS_RUNS, in any batches, gives the same rows."""

from __future__ import annotations

import json
import uuid
from datetime import timedelta
from typing import Any

import asyncpg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from nexus_events.contract import subjects
from nexus_events.contract.codec import Decoded, JsMeta, decode, encode
from nexus_events.contract.streams import RUNS, TASKS
from nexus_events.events import (
    Column,
    Event,
    RunCompleted,
    RunDispatched,
    RunFailed,
    RunRequested,
    RunResult,
    RunStarted,
    TaskCreated,
    TaskMoved,
)
from nexus_events.transport.bus import Bus, Outgoing
from nexus_events.transport.catalog_commands import apply_agent, apply_skill
from nexus_events.transport.projection import rebuild

from nexus_core.app import CoreApp
from nexus_core.board_projection import BoardProjection

from ..run_events import T0
from .support import AGENT_YAML, SKILL_MD, catalog_ready, event_names, eventually, query

REVIEWER_YAML = AGENT_YAML.replace("id: implementer", "id: reviewer")


async def _caught_up(core: CoreApp, bus: Bus) -> None:
    assert core.views_runner is not None
    await core.views_runner.wait_until(RUNS, (await bus.js.stream_info(RUNS)).state.last_seq)
    await core.views_runner.wait_until(TASKS, (await bus.js.stream_info(TASKS)).state.last_seq)


async def _request(bus: Bus, run_id: str, agent: str, parent: str | None = None) -> None:
    body: dict[str, Any] = {"agent_id": agent, "task_id": "T-1", "input": "go"}
    if parent is not None:
        body["parent_run_id"] = parent
    await bus.js.publish(subjects.run_event(run_id, "requested"), json.dumps(body).encode())
    await eventually(lambda: event_names(bus, run_id), lambda names: "prepared" in names)


async def _start(bus: Bus, run_id: str) -> None:
    await bus.publish_many([
        Outgoing(subjects.run_event(run_id, "dispatched"),
                 RunDispatched(runtime="local", handle=f"pid-{run_id}")),
        Outgoing(subjects.run_event(run_id, "started"), RunStarted(runner="host")),
    ])  # fmt: skip


async def _board_rows(pool: asyncpg.Pool[Any]) -> tuple[list[Any], list[Any]]:
    tasks = await pool.fetch("SELECT * FROM core_board.tasks ORDER BY task_id")
    index = await pool.fetch("SELECT * FROM core_board.run_index ORDER BY run_id")
    return [dict(r) for r in tasks], [dict(r) for r in index]


async def test_a_finished_child_leaves_its_parents_task_in_progress(
    bus: Bus, core: CoreApp, core_pool: asyncpg.Pool[Any]
) -> None:
    await apply_agent(bus, AGENT_YAML)
    await apply_agent(bus, REVIEWER_YAML)
    await apply_skill(bus, SKILL_MD)
    await catalog_ready(core)
    await bus.publish(
        subjects.task_event("T-1", "created"), TaskCreated(title="Fix", column=Column.TODO)
    )
    await _request(bus, "parent", "implementer")
    await _start(bus, "parent")
    # The parent delegates a review (what the channel gateway publishes), which finishes.
    await _request(bus, "child", "reviewer", parent="parent")
    await _start(bus, "child")
    await bus.publish(
        subjects.run_event("child", "completed"),
        RunCompleted(result=RunResult(summary="looks good")),
    )
    await _caught_up(core, bus)

    error, board = await query(bus, subjects.CORE_BOARD_GET)
    assert error is None
    [task] = board["tasks"]
    assert task["column"] == "in_progress"
    assert task["current_run"] == {"run_id": "parent", "status": "running", "attempt": 1}
    assert task["past_runs"] == []
    assert task["child_runs"] == [
        {"run_id": "child", "status": "completed", "attempt": 1, "agent_id": "reviewer",
         "parent_run_id": "parent"},
    ]  # fmt: skip

    # The parent's own ending is what moves the task.
    await bus.publish(
        subjects.run_event("parent", "completed"), RunCompleted(result=RunResult(summary="done"))
    )
    await _caught_up(core, bus)
    _, board = await query(bus, subjects.CORE_BOARD_GET)
    [task] = board["tasks"]
    assert (task["column"], task["current_run"]["status"]) == ("review", "completed")

    live = await _board_rows(core_pool)
    await rebuild(bus, core_pool, BoardProjection())
    assert await _board_rows(core_pool) == live


# -- any interleaving of the two streams gives the same rows ---------------------------------


def _decoded(subject: str, event: Event, stream: str, seq: int, second: int) -> Decoded:
    enc = encode(subject, event, source="test")
    at = T0 + timedelta(seconds=second)
    return decode(subject, enc.body, enc.headers, JsMeta(stream, seq, int(at.timestamp() * 1e9)))


def _streams(task: str, child_end: str) -> tuple[list[Decoded], list[Decoded]]:
    """A task moved by hand while its root run delegates twice (a child and a grandchild)."""
    p, c, g = (f"{task}-{x}" for x in ("p", "c", "g"))
    ending = {
        "completed": RunCompleted(result=RunResult(summary="ok")),
        "failed": RunFailed(reason="runner_error", message="boom"),
    }
    runs = [
        (p, "requested", RunRequested(agent_id="implementer", task_id=task)),
        (p, "started", RunStarted()),
        (c, "requested", RunRequested(agent_id="reviewer", task_id=task, parent_run_id=p)),
        (c, "started", RunStarted()),
        (g, "requested", RunRequested(agent_id="tester", task_id=task, parent_run_id=c)),
        (g, child_end, ending[child_end]),
        (c, child_end, ending[child_end]),
    ]
    # The manual move comes after the root run's request but before it starts: the run's
    # column is the newer one, and so would be a child's (later) ending if it counted.
    tasks = [
        (subjects.task_event(task, "created"), TaskCreated(title="t", column=Column.TODO)),
        (subjects.task_event(task, "moved"), TaskMoved(column=Column.BACKLOG)),
    ]
    run_stream = [
        _decoded(subjects.run_event(rid, name), ev, RUNS, i + 1, 2 * i + 1)
        for i, (rid, name, ev) in enumerate(runs)
    ]
    task_stream = [_decoded(s, ev, TASKS, i + 1, 2 * i) for i, (s, ev) in enumerate(tasks)]
    return task_stream, run_stream


def _batches(events: list[Decoded], data: st.DataObject, label: str) -> list[list[Decoded]]:
    inner = st.integers(1, len(events) - 1) if len(events) > 1 else st.nothing()
    cuts = sorted(data.draw(st.sets(inner), label=label))
    return [events[a:b] for a, b in zip([0, *cuts], [*cuts, len(events)], strict=True)]


IN_ORDER = "prop_board_in_order"
INTERLEAVED = "prop_board_interleaved"


@pytest.fixture
async def board_schemas(pg_pool: asyncpg.Pool[Any]) -> asyncpg.Pool[Any]:
    async with pg_pool.acquire() as conn:
        for schema in (IN_ORDER, INTERLEAVED):
            await conn.execute(f"CREATE SCHEMA IF NOT EXISTS {schema}")
            await BoardProjection(schema).create(conn, schema)
    return pg_pool


async def _stored(pool: asyncpg.Pool[Any], schema: str, task: str) -> tuple[Any, list[Any]]:
    row = await pool.fetchrow(f"SELECT * FROM {schema}.tasks WHERE task_id = $1", task)
    index = await pool.fetch(
        f"SELECT * FROM {schema}.run_index WHERE task_id = $1 ORDER BY run_id", task
    )
    return None if row is None else dict(row), [dict(r) for r in index]


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.data(), child_end=st.sampled_from(["completed", "failed"]))
async def test_any_interleaving_keeps_the_root_run_current(
    board_schemas: asyncpg.Pool[Any], data: st.DataObject, child_end: str
) -> None:
    task = f"T{uuid.uuid4().hex[:10]}"  # each example its own task: rows never collide
    task_stream, run_stream = _streams(task, child_end)
    projection = BoardProjection()
    for batch in ([*task_stream], [*run_stream]):
        async with board_schemas.acquire() as conn, conn.transaction():
            await projection.apply(conn, IN_ORDER, batch)

    # Each stream in its own order, cut in batches; the two followers' batches interleave.
    queues = [_batches(task_stream, data, "task cuts"), _batches(run_stream, data, "run cuts")]
    while any(queues):
        pick = data.draw(st.sampled_from([i for i, q in enumerate(queues) if q]), label="next")
        async with board_schemas.acquire() as conn, conn.transaction():
            await projection.apply(conn, INTERLEAVED, queues[pick].pop(0))

    reference = await _stored(board_schemas, IN_ORDER, task)
    assert await _stored(board_schemas, INTERLEAVED, task) == reference
    row, index = reference
    assert row is not None
    # The root run alone decides the row: running (in progress), the children not in `runs`.
    assert (row["current_run_id"], row["run_column"], row["board_column"]) == (
        f"{task}-p", "in_progress", "in_progress",
    )  # fmt: skip
    assert json.loads(row["runs"]) == [f"{task}-p"]
    assert {r["run_id"]: r["status"] for r in index} == {
        f"{task}-p": "running", f"{task}-c": child_end, f"{task}-g": child_end,
    }  # fmt: skip
