"""End to end on real NATS + PostgreSQL with the fake Plane: work items start runs, runs show
up on their work items, people steer them from Plane."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from nexus_events.contract import subjects
from nexus_events.contract.codec import Decoded
from nexus_events.contract.streams import INBOX
from nexus_events.events import (
    ApprovalDecision,
    CancelRequested,
    Column,
    InboxMessage,
    Origin,
    PlaneWriteRequested,
    PlaneWriteSucceeded,
    RunRequested,
    TaskCreated,
    TaskMoved,
    TaskUpdated,
)
from nexus_events.transport.bus import Bus
from nexus_testing import dead_letters, eventually
from tests.fakes.plane import HUMAN, FakePlane
from tests.support.plane_sync import (
    MakeSync,
    ask_approval,
    complete,
    plane_events,
    run_events,
    start_run,
    task_events,
)

from nexus_plane_sync.app import PlaneSyncApp

T = TypeVar("T")


async def _requested(bus: Bus, count: int = 1) -> list[tuple[str, RunRequested]]:
    async def check() -> list[tuple[str, RunRequested]] | None:
        found = [
            (d.address.run_id or "", d.event)
            for d in await run_events(bus, "requested")
            if isinstance(d.event, RunRequested)
        ]
        return found if len(found) >= count else None

    result: list[tuple[str, RunRequested]] = await eventually(check, what="run requested")
    return result


def _texts(plane: FakePlane, item: str) -> list[str]:
    return [c["comment_html"] for c in plane.comments_of(item)]


async def test_a_labelled_work_item_runs_and_shows_its_result(
    bus: Bus, plane: FakePlane, sync: PlaneSyncApp
) -> None:
    item = plane.human_create_work_item(
        "Fix the flaky test", labels=["agent:implementer", "bug"],
        description_html="<p>tests/test_x.py fails one run in ten</p>",
    )  # fmt: skip
    [(run_id, request)] = await _requested(bus)
    assert request.agent_id == "implementer"
    assert request.origin is Origin.PLANE
    assert request.task_id == f"plane-{item}"
    assert "Fix the flaky test" in request.input
    assert "one run in ten" in request.input
    assert request.requested_by == HUMAN["display_name"]
    [task] = [d.event for d in await task_events(bus)]
    assert isinstance(task, TaskCreated)
    assert (task.external_id, task.external_source) == (item, "plane")

    await start_run(bus, run_id)
    await complete(bus, run_id)
    done = plane.state_named("Done")["id"]
    await eventually(
        lambda: len(plane.comments_of(item)) == 2 and plane.work_items[item]["state"] == done,
        what="the result on the work item",
    )
    started, result = _texts(plane, item)
    assert "started working" in started
    assert "implementer" in started
    assert "https://git.example/pr/7" in result
    assert "1 file changed" in result
    assert "Fixed the failing test." in result
    # Our own writes come back as webhooks: recognised as echoes, no second run.
    await plane.settle()
    await eventually(lambda: sync.metrics.webhooks["ignored:echo"] >= 3, what="echoes seen")
    assert len(await run_events(bus, "requested")) == 1
    # Every write is an intent and an outcome with the same idempotency key (an outcome is
    # published just after Plane answered, so it may trail what Plane already shows).
    intents = await plane_events(bus, "write_requested")

    async def all_outcomes() -> list[Any]:
        found = await plane_events(bus, "write_succeeded")
        return found if len(found) >= len(intents) else []

    outcomes = await eventually(all_outcomes, what="an outcome for every intent")
    assert all(isinstance(e, PlaneWriteRequested) for e in intents)
    assert all(isinstance(e, PlaneWriteSucceeded) for e in outcomes)
    assert {e.write_id for e in intents} == {e.write_id for e in outcomes}
    assert {e.op for e in intents} >= {"comment", "work_item_upsert"}


async def test_comments_reach_the_run_answer_approvals_and_stop_it(
    bus: Bus, plane: FakePlane, sync: PlaneSyncApp
) -> None:
    item = plane.human_create_work_item("Clean the build", labels=["agent:coder"])
    [(run_id, _)] = await _requested(bus)
    await start_run(bus, run_id)
    await ask_approval(bus, run_id, "ap-1")
    await eventually(
        lambda: any("/approve ap-1" in t for t in _texts(plane, item)),
        what="the approval comment saying how to answer",
    )
    plane.human_comment(item, "please also update the docs")
    plane.human_comment(item, "/approve ap-1 go ahead")

    async def inbox() -> list[object]:
        return [d.event for d in await _inbox(bus, run_id)]

    # Two comments are two webhooks: Plane (and the fake) may deliver them in either order.
    received = await eventually(lambda: _at_least(inbox, 2), what="two inbox messages")
    [message] = [m for m in received if isinstance(m, InboxMessage)]
    [decision] = [m for m in received if isinstance(m, ApprovalDecision)]
    assert isinstance(message, InboxMessage)
    assert message.text == "please also update the docs"
    assert message.sender == HUMAN["display_name"]
    assert isinstance(decision, ApprovalDecision)
    assert (decision.approval_id, decision.decision, decision.comment) == (
        "ap-1", "approve", "go ahead",
    )  # fmt: skip

    plane.human_comment(item, "/stop")
    [cancel] = await eventually(
        lambda: _at_least(lambda: _events(bus, "cancel_requested"), 1), what="cancel requested"
    )
    assert cancel.address.run_id == run_id
    assert isinstance(cancel.event, CancelRequested)
    assert cancel.event.requested_by == HUMAN["display_name"]


async def test_deny_in_a_comment_decides_the_approval(
    bus: Bus, plane: FakePlane, sync: PlaneSyncApp
) -> None:
    item = plane.human_create_work_item("Drop the old tables", labels=["agent:coder"])
    [(run_id, _)] = await _requested(bus)
    await start_run(bus, run_id)
    await ask_approval(bus, run_id, "ap-2")
    await eventually(
        lambda: any("/deny ap-2" in t for t in _texts(plane, item)), what="the approval comment"
    )
    plane.human_comment(item, "/deny ap-2 not on a Friday")
    [decision] = await eventually(
        lambda: _at_least(lambda: _inbox(bus, run_id), 1), what="the decision"
    )
    assert isinstance(decision.event, ApprovalDecision)
    assert (decision.event.approval_id, decision.event.decision) == ("ap-2", "deny")
    assert (decision.event.comment, decision.event.decided_by) == (
        "not on a Friday", HUMAN["display_name"],
    )  # fmt: skip


async def test_removing_the_label_cancels_the_run(
    bus: Bus, plane: FakePlane, sync: PlaneSyncApp
) -> None:
    item = plane.human_create_work_item("Refactor", labels=["agent:coder", "backend"])
    [(run_id, _)] = await _requested(bus)
    await start_run(bus, run_id)
    await eventually(lambda: len(plane.comments_of(item)) == 1, what="started comment")
    plane.human_set_labels(item, ["backend"])
    [cancel] = await eventually(
        lambda: _at_least(lambda: _events(bus, "cancel_requested"), 1), what="cancel requested"
    )
    assert cancel.address.run_id == run_id
    # Adding it back asks for a new run.
    plane.human_set_labels(item, ["backend", "agent:coder"])
    runs = await _requested(bus, 2)
    assert len({rid for rid, _ in runs}) == 2


async def test_a_work_item_label_that_is_no_agent_id_is_dead_lettered(
    bus: Bus, plane: FakePlane, sync: PlaneSyncApp
) -> None:
    plane.human_create_work_item("Bad", labels=["agent:two words"])
    letters = await eventually(lambda: dead_letters(bus), what="a dead letter")
    assert letters[0].reason == "invalid_agent_label"
    assert letters[0].consumer == "plane_sync_webhooks"
    assert await run_events(bus, "requested") == []
    await eventually(lambda: sync.metrics.webhooks["unusable"] == 1, what="counted unusable")


async def _events(bus: Bus, name: str) -> list[Decoded]:
    return await run_events(bus, name)


async def _inbox(bus: Bus, run_id: str) -> list[Decoded]:
    return [d async for d in bus.replay(INBOX, filter_subject=subjects.inbox(run_id))]


async def _at_least(read: Callable[[], Awaitable[list[T]]], n: int) -> list[T] | None:
    found = await read()
    return found if len(found) >= n else None


async def test_assigning_the_bot_runs_the_configured_agent(
    bus: Bus, plane: FakePlane, make_sync: MakeSync
) -> None:
    await make_sync(plane_assign_agent="implementer")
    item = plane.human_create_work_item("Assigned work", labels=["backend"])
    plane.human_assign(item, [HUMAN["id"]])  # a person: nothing
    plane.human_assign(item, [HUMAN["id"], plane.bot["id"]])
    [(run_id, request)] = await _requested(bus)
    assert request.agent_id == "implementer"
    assert request.task_id == f"plane-{item}"
    plane.human_assign(item, [HUMAN["id"]])
    [cancel] = await eventually(
        lambda: _at_least(lambda: _events(bus, "cancel_requested"), 1), what="cancel requested"
    )
    assert cancel.address.run_id == run_id


async def test_renaming_describing_and_moving_the_work_item_edits_its_task(
    bus: Bus, plane: FakePlane, sync: PlaneSyncApp
) -> None:
    item = plane.human_create_work_item("Old name", labels=["agent:coder"])
    await _requested(bus)
    # The web app's edits: deliveries with field name, description_html and state_id.
    plane.human_update(
        item, name="New name", description_html="<p>Now <em>with</em> details</p>",
        state=plane.state_named("Done")["id"],
    )  # fmt: skip

    async def edits() -> list[Decoded] | None:
        found = [d for d in await task_events(bus) if d.address.event in ("updated", "moved")]
        return found if len(found) == 3 else None

    changes = [(d.address.event, d.event) for d in await eventually(edits, what="task edits")]
    updates = [e for name, e in changes if name == "updated" and isinstance(e, TaskUpdated)]
    assert {u.title for u in updates} == {"New name", None}
    assert {u.description for u in updates} == {"Now with details", None}
    assert {u.updated_by for u in updates} == {f"plane:{HUMAN['display_name']}"}
    [moved] = [e for name, e in changes if name == "moved"]
    assert isinstance(moved, TaskMoved)
    assert moved.column is Column.DONE
    # The board (plane-sync's mirror of the tasks) has them.
    assert sync.store is not None
    store = sync.store

    async def board() -> bool:
        row = await store.task(f"plane-{item}")
        return row is not None and (row["title"], row["description"], row["col"]) == (
            "New name", "Now with details", "done",
        )  # fmt: skip

    await eventually(board, what="the task renamed, described and moved on the board")
    assert sync.store is not None
    assert (await sync.store.counts()).get("pending", 0) == 0
    assert not [c for c in plane.calls if c[0] == "PATCH" and item in c[1]]
