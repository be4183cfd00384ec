"""A delegated child run on Plane, end to end on real NATS + PostgreSQL with the fake Plane:
it shows on its parent's work item as the parent's delegation (comments, or activities of the
parent's native agent run), and its ending never moves the work item while the parent works."""

from __future__ import annotations

from nexus_events.events import (
    ApprovalDecision,
    InboxMessage,
    RunCompleted,
    RunFailed,
    RunRequested,
    RunResult,
)
from nexus_events.transport.bus import Bus
from nexus_testing import eventually
from tests.fakes.plane import FakePlane
from tests.support.plane_sync import (
    MakeSync,
    ask_approval,
    complete,
    inbox,
    publish_run,
    run_events,
    start_run,
)

from nexus_plane_sync.app import PlaneSyncApp


async def _root_run(bus: Bus) -> str:
    async def first() -> str | None:
        found = [d.address.run_id for d in await run_events(bus, "requested")]
        return found[0] if found else None

    run_id: str = await eventually(first, what="the run requested from the labelled item")
    return run_id


async def _delegate(bus: Bus, parent: str, child: str, agent: str) -> None:
    """What the channel gateway publishes for a `delegate` tool call of `parent`."""
    [request] = [d.event for d in await run_events(bus, "requested") if d.address.run_id == parent]
    assert isinstance(request, RunRequested)
    await publish_run(
        bus, child, "requested",
        RunRequested(agent_id=agent, task_id=request.task_id, parent_run_id=parent),
    )  # fmt: skip


async def _settled(sync: PlaneSyncApp) -> None:
    """Every run event mirrored and every queued write done."""
    assert sync.runner is not None
    assert sync.store is not None
    last = (await sync.bus.js.stream_info("NEXUS_RUNS")).state.last_seq
    await eventually(lambda: sync.runner.last_seq.get("NEXUS_RUNS", 0) >= last, what="mirrored")

    async def idle() -> bool:
        assert sync.store is not None
        return (await sync.store.counts()).get("pending", 0) == 0

    await eventually(idle, within=20, what="the outbox empty")


async def test_a_child_run_reports_on_its_parents_item_and_leaves_its_state(
    bus: Bus, plane: FakePlane, sync: PlaneSyncApp
) -> None:
    item = plane.human_create_work_item("Ship it", labels=["agent:implementer"])
    parent = await _root_run(bus)
    await start_run(bus, parent)
    await _delegate(bus, parent, "run_review1", "reviewer")
    await start_run(bus, "run_review1")
    await publish_run(
        bus, "run_review1", "completed", RunCompleted(result=RunResult(summary="Looks right."))
    )
    await _delegate(bus, parent, "run_test1", "tester")
    await publish_run(
        bus, "run_test1", "failed", RunFailed(reason="runner_error", message="no tests found")
    )
    await _settled(sync)

    texts = [c["comment_html"] for c in plane.comments_of(item)]
    assert len(texts) == 5, texts  # started, two delegations, a result, a failure
    started, review, reviewed, test, tested = texts
    assert "implementer" in started
    assert "started working" in started
    assert "Delegated to <strong>reviewer</strong>" in review
    assert "run_review1" in review
    assert parent in review
    assert "reviewer" in reviewed
    assert "Looks right." in reviewed
    assert "run_review1" in reviewed
    assert "Delegated to <strong>tester</strong>" in test
    assert "failed" in tested
    assert "no tests found" in tested
    assert "run_test1" in tested
    # The children's endings moved nothing: the item is where the parent's start put it.
    in_progress = plane.state_named("In Progress")["id"]
    assert plane.work_items[item]["state"] == in_progress

    await complete(bus, parent)
    done = plane.state_named("Done")["id"]
    await eventually(lambda: plane.work_items[item]["state"] == done, what="the parent's end")


async def test_a_child_run_is_activity_of_the_parents_native_agent_run(
    bus: Bus, plane: FakePlane, make_sync: MakeSync
) -> None:
    plane.agent_runs = True
    sync = await make_sync(plane_agent_runs="on")
    item = plane.human_create_work_item("Add a feature", labels=["agent:planner"])
    parent = await _root_run(bus)
    await start_run(bus, parent)
    await _delegate(bus, parent, "run_impl1", "implementer")
    await start_run(bus, "run_impl1")
    await complete(bus, "run_impl1")
    await _settled(sync)

    [plane_run] = plane.runs.values()  # one Plane agent run: the parent's
    assert plane_run["issue"] == item
    bodies = [(a["type"], a["content"]["body"]) for a in plane.activities.values()]
    assert [kind for kind, _ in bodies] == ["thought", "action", "response"]
    assert "implementer" in bodies[1][1]
    assert "run_impl1" in bodies[1][1]
    assert bodies[2][1].startswith("implementer (run run_impl1): Fixed the failing test.")
    assert plane.comments_of(item) == []
    # Stopping the Plane agent run stops the parent, whose delegation it shows.
    plane.human_stop_run(plane_run["id"])

    async def cancelled() -> list[str | None]:
        return [d.address.run_id for d in await run_events(bus, "cancel_requested")]

    assert await eventually(cancelled, what="the stop signal") == [parent]


async def test_comments_reach_the_parent_and_approvals_the_child_that_asks(
    bus: Bus, plane: FakePlane, sync: PlaneSyncApp
) -> None:
    item = plane.human_create_work_item("Review me", labels=["agent:implementer"])
    parent = await _root_run(bus)
    await start_run(bus, parent)
    # A child id that sorts before the parent's: the pick must not depend on the ids.
    child = "a-child-1"
    await _delegate(bus, parent, child, "reviewer")
    await start_run(bus, child)
    await _settled(sync)
    plane.human_comment(item, "remember the changelog")
    message = await eventually(lambda: inbox(bus, parent), what="the comment in an inbox")
    assert [m.text for m in message if isinstance(m, InboxMessage)] == ["remember the changelog"]
    assert await inbox(bus, child) == []

    await ask_approval(bus, child, "ap-c")
    await eventually(
        lambda: any("/approve ap-c" in c["comment_html"] for c in plane.comments_of(item)),
        what="the child's approval question on the item",
    )
    plane.human_comment(item, "/approve ap-c")
    [decision] = await eventually(lambda: inbox(bus, child), what="the decision")
    assert isinstance(decision, ApprovalDecision)
    assert decision.approval_id == "ap-c"
