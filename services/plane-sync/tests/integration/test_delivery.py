"""Writes land once and in order: Plane away and back, 429s, restarts, and resyncs."""

from __future__ import annotations

import re

from nexus_events.contract import subjects
from nexus_events.events import (
    Column,
    PlaneResyncReply,
    PlaneStatusReply,
    RunRequested,
    TaskMoved,
    TaskUpdated,
)
from nexus_events.transport.bus import Bus
from nexus_testing import eventually
from tests.fakes.plane import FakePlane
from tests.support.plane_sync import (
    MakeSync,
    ask_approval,
    complete,
    create_task,
    plane_events,
    publish_run,
    run_events,
    start_run,
    turn,
)

from nexus_plane_sync.app import PlaneSyncApp


async def _item(plane: FakePlane, task_id: str) -> str:
    item = await eventually(lambda: plane.by_external_id(task_id), what=f"work item of {task_id}")
    return str(item["id"])


async def _idle(app: PlaneSyncApp) -> None:
    assert app.store is not None
    store = app.store

    async def empty() -> bool:
        counts = await store.counts()
        return counts.get("pending", 0) == 0

    await eventually(empty, within=30, what="an empty outbox")


def _kinds(plane: FakePlane, item: str) -> list[str]:
    kinds = []
    for c in plane.comments_of(item):
        html = c["comment_html"]
        kind = next(
            k for k, mark in (("started", "started working"), ("progress", "turn(s)"),
                              ("approval", "Approval needed"), ("result", "Run completed"),
                              ("ended", "Run "))
            if mark in html
        )  # fmt: skip
        kinds.append(kind)
    return kinds


async def _request(bus: Bus, run_id: str, task_id: str) -> None:
    await publish_run(bus, run_id, "requested", RunRequested(agent_id="coder", task_id=task_id))


async def test_nexus_tasks_become_work_items_that_follow_the_board(
    bus: Bus, plane: FakePlane, sync: PlaneSyncApp
) -> None:
    await create_task(bus, "t-1", "Write the docs", description="All of them.", labels=["docs"])
    item = await _item(plane, "t-1")
    wi = plane.work_items[item]
    assert wi["name"] == "Write the docs"
    assert wi["external_source"] == "nexus"
    assert "All of them." in wi["description_html"]
    assert wi["labels"] == [plane.label("docs")["id"]]
    await bus.publish(subjects.task_event("t-1", "moved"), TaskMoved(column=Column.DONE))
    await bus.publish(subjects.task_event("t-1", "updated"), TaskUpdated(title="Docs, all"))
    await eventually(
        lambda: (
            plane.work_items[item]["state"] == plane.state_named("Done")["id"]
            and plane.work_items[item]["name"] == "Docs, all"
        ),
        what="the move and the new title",
    )
    assert len(plane.work_items) == 1


async def test_plane_away_then_back_every_update_lands_once_in_order(
    bus: Bus, plane: FakePlane, sync: PlaneSyncApp
) -> None:
    await create_task(bus, "t-2", "Flaky test")
    item = await _item(plane, "t-2")
    await _idle(sync)
    plane.down = True
    await _request(bus, "r-2", "t-2")
    await start_run(bus, "r-2")
    for n in range(1, 6):
        await turn(bus, "r-2", n)
    await ask_approval(bus, "r-2", "ap-2")
    await complete(bus, "r-2")
    await eventually(
        lambda: sync.metrics.writes["plane_away"] >= 2, what="the writer met Plane away"
    )
    assert plane.comments_of(item) == []
    plane.down = False
    await _idle(sync)
    assert _kinds(plane, item) == ["started", "progress", "approval", "result"]
    progress = plane.comments_of(item)[1]["comment_html"]
    assert "5 turn(s)" in progress  # the five turns coalesced into one comment
    assert plane.work_items[item]["state"] == plane.state_named("Done")["id"]
    outcomes = [e for e in await plane_events(bus, "write_succeeded") if e.op == "comment"]
    assert len(outcomes) == 4
    assert len({e.write_id for e in outcomes}) == 4


async def test_a_restart_mid_run_posts_nothing_twice(
    bus: Bus, plane: FakePlane, make_sync: MakeSync
) -> None:
    first = await make_sync()
    await create_task(bus, "t-3", "Upgrade deps")
    item = await _item(plane, "t-3")
    await _request(bus, "r-3", "t-3")
    await start_run(bus, "r-3")
    await eventually(lambda: len(plane.comments_of(item)) == 1, what="the started comment")
    await _idle(first)
    assert first.store is not None
    # The worst moment to die: the writes reached Plane, their settling did not reach the
    # database. Put them back as pending and forget the Plane ids, as such a crash would.
    await first.store.pool.execute(
        "UPDATE plane_sync.outbox SET state = 'pending', done_at = NULL WHERE op = 'run_report'"
    )
    await first.store.pool.execute("DELETE FROM plane_sync.objects")
    await first.stop()
    await ask_approval(bus, "r-3", "ap-3")
    await complete(bus, "r-3")
    second = await make_sync()
    await eventually(lambda: len(plane.comments_of(item)) >= 3, what="the later comments")
    await _idle(second)
    assert _kinds(plane, item) == ["started", "approval", "result"]
    assert len(plane.work_items) == 1
    # The started comment was posted again and Plane answered 409 with the first one's id.
    assert ("POST", f"{_comments_path(plane, item)}", 409) in plane.calls


def _comments_path(plane: FakePlane, item: str) -> str:
    return (
        f"/api/v1/workspaces/{plane.workspace}/projects/{plane.project_id}"
        f"/work-items/{item}/comments/"
    )


async def test_rate_limited_writes_wait_for_the_reset_and_land_once(
    bus: Bus, plane: FakePlane, make_sync: MakeSync
) -> None:
    plane.rate_limit, plane.rate_window = 4, 2.0
    sync = await make_sync(plane_bot_user_id=plane.bot["id"])
    for n in range(6):
        await create_task(bus, f"t-rl-{n}", f"Task {n}")
    await eventually(lambda: len(plane.work_items) == 6, within=30, what="six work items")
    await _idle(sync)
    assert any(status == 429 for _, _, status in plane.calls)
    assert sorted(w["external_id"] for w in plane.work_items.values()) == [
        f"t-rl-{n}" for n in range(6)
    ]


async def test_native_agent_runs_when_the_edition_has_them(
    bus: Bus, plane: FakePlane, make_sync: MakeSync
) -> None:
    plane.agent_runs = True
    sync = await make_sync(plane_agent_runs="auto")
    assert sync.board is not None
    assert sync.board.mode == "agent_runs"
    item = plane.human_create_work_item("Add a feature", labels=["agent:planner"])
    run_id = await eventually(
        lambda: _first_run(bus), what="the run requested from the labelled item"
    )
    await start_run(bus, run_id)
    await turn(bus, run_id, 1)
    await ask_approval(bus, run_id, "ap-4")
    await complete(bus, run_id)
    await eventually(lambda: len(plane.activities) == 3, what="three activities")
    [plane_run] = plane.runs.values()
    assert plane_run["issue"] == item
    kinds = [a["type"] for a in plane.activities.values()]
    assert kinds == ["thought", "elicitation", "response"]
    assert "/approve ap-4" in list(plane.activities.values())[1]["content"]["body"]
    assert plane.comments_of(item) == []
    plane.human_stop_run(plane_run["id"])

    async def cancelled() -> bool:
        return any(d.address.run_id == run_id for d in await run_events(bus, "cancel_requested"))

    await eventually(cancelled, what="the stop signal cancels the run")


async def _first_run(bus: Bus) -> str | None:
    async for d in bus.replay(
        "NEXUS_RUNS", filter_subject=subjects.run_events_filter(event="requested")
    ):
        return d.address.run_id
    return None


async def test_status_and_an_idempotent_resync(
    bus: Bus, plane: FakePlane, sync: PlaneSyncApp
) -> None:
    await create_task(bus, "t-5", "Resync me", labels=["x"])
    item = await _item(plane, "t-5")
    await _idle(sync)
    plane.work_items[item]["name"] = "changed by hand in the database"
    reply = await bus.nc.request(subjects.PLANE_RESYNC, b"{}", timeout=10)
    assert PlaneResyncReply.model_validate_json(reply.data).queued == 1
    await eventually(
        lambda: plane.work_items[item]["name"] == "Resync me", what="the resync rewrote it"
    )
    await _idle(sync)
    assert len(plane.work_items) == 1
    status = PlaneStatusReply.model_validate_json(
        (await bus.nc.request(subjects.PLANE_STATUS, b"", timeout=10)).data
    )
    assert status.mode == "comments"
    assert status.pending_writes == 0
    assert status.done_writes >= 2
    assert status.tasks == 1
    assert status.plane_reachable
    assert sync.store is not None
    assert await sync.store.prune(done_days=0, delivery_days=0) >= 2  # settled rows go
    assert (await sync.store.counts()).get("done", 0) == 0
    bad = await bus.nc.request(subjects.PLANE_RESYNC, b'{"task_ids": ["a.b"]}', timeout=10)
    assert bad.headers is not None
    assert bad.headers.get("Nats-Service-Error-Code") == "400"
    assert re.search("task_ids", bad.data.decode())


async def test_a_run_on_an_unknown_task_fails_its_writes_and_holds_no_one_back(
    bus: Bus, plane: FakePlane, make_sync: MakeSync
) -> None:
    sync = await make_sync(plane_unknown_task_grace=1.0)
    await _request(bus, "r-ghost", "no-such-task")
    await start_run(bus, "r-ghost")
    await create_task(bus, "t-6", "A real one")
    await _item(plane, "t-6")  # not held back by the ghost's waiting write

    async def given_up() -> set[str] | None:
        ids = {e.write_id for e in await plane_events(bus, "write_failed")}
        return ids if len(ids) == 2 else None

    ids = await eventually(given_up, what="the ghost run's two writes given up")
    assert ids == {"run:r-ghost:started", next(i for i in ids if i.startswith("item:"))}
    assert all("no-such-task" in e.error for e in await plane_events(bus, "write_failed"))
    intents = await plane_events(bus, "write_requested")
    assert [e for e in intents if e.task_id == "no-such-task"] == []
    await _idle(sync)


async def test_server_errors_and_timeouts_are_retried_until_the_write_lands(
    bus: Bus, plane: FakePlane, make_sync: MakeSync
) -> None:
    sync = await make_sync(plane_bot_user_id=plane.bot["id"], plane_timeout=0.5)
    plane.fail_next(3, 502)  # more than one request's retries: the writer has to come back
    await create_task(bus, "t-7", "Through 502s")
    await _item(plane, "t-7")
    await _idle(sync)
    assert [s for _, _, s in plane.calls].count(502) == 3
    plane.delay = 2.0  # every answer later than the client's timeout
    await create_task(bus, "t-8", "Through timeouts")
    await eventually(lambda: sync.metrics.writes["plane_away"] >= 1, what="timeouts met")
    plane.delay = 0.0
    await _item(plane, "t-8")
    await _idle(sync)
    # A timed-out create may still land on Plane: the retry finds it by external id.
    assert sorted(w["external_id"] for w in plane.work_items.values()) == ["t-7", "t-8"]
