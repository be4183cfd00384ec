"""`/approve` in Plane claims the approval like every other surface, on real NATS +
PostgreSQL with the fake Plane: answered at once from Plane and the CLI, the run gets exactly
one decision; a comment that lost is told on the work item who decided."""

from __future__ import annotations

import asyncio

from nexus_events.events import ApprovalDecision, ApprovalRefused, RunRequested
from nexus_events.transport.approvals import claim_approval, held_claim
from nexus_events.transport.bus import Bus
from nexus_testing import eventually
from tests.fakes.plane import HUMAN, FakePlane
from tests.support.approvals import cli_decides
from tests.support.plane_sync import ask_approval, inbox, run_events, start_run

from nexus_plane_sync.app import PlaneSyncApp

BOB = {"id": "bob-user", "display_name": "bob", "email": "bob@example.com"}


def _texts(plane: FakePlane, item: str) -> list[str]:
    return [c["comment_html"] for c in plane.comments_of(item)]


async def _asked_on_a_work_item(
    bus: Bus, plane: FakePlane, title: str, approval: str
) -> tuple[str, str]:
    """A person files a work item for `ops`; its run asks for `approval`, and the ask is on
    the item (a person answers what they see, so plane-sync knows the run). (item, run id)"""
    item = plane.human_create_work_item(title, labels=["agent:ops"])
    requested = await eventually(lambda: run_events(bus, "requested"), what="run requested")
    assert isinstance(requested[0].event, RunRequested)
    run_id = requested[0].address.run_id
    assert run_id is not None
    await start_run(bus, run_id)
    await ask_approval(bus, run_id, approval)
    await eventually(
        lambda: any(f"/approve {approval}" in t for t in _texts(plane, item)),
        what="the approval ask",
    )
    return item, run_id


async def test_plane_and_the_cli_answering_at_once_make_one_decision(
    bus: Bus, plane: FakePlane, sync: PlaneSyncApp
) -> None:
    item, run_id = await _asked_on_a_work_item(bus, plane, "Restart the API", "ap-7")

    def answered() -> int:
        w = sync.metrics.webhooks
        return w["approvals"] + w["approvals_already_decided"]

    # The person in Plane and the operator at the CLI answer at the same moment.
    plane.human_comment(item, "/approve ap-7 looks fine")
    cli_won = await cli_decides(bus, run_id, "ap-7", "deny")
    await eventually(lambda: answered() == 1, what="the Plane comment handled")
    decisions = await eventually(lambda: inbox(bus, run_id), what="a decision")
    assert len(await inbox(bus, run_id)) == 1
    decision = decisions[0]
    assert isinstance(decision, ApprovalDecision)
    if cli_won:
        assert (decision.decision, decision.surface) == ("deny", "cli")
        assert sync.metrics.webhooks["approvals_already_decided"] == 1
    else:
        assert (decision.decision, decision.surface, decision.decided_by) == (
            "approve",
            "plane",
            HUMAN["display_name"],
        )
        assert decision.comment == "looks fine"
        assert sync.metrics.webhooks["approvals"] == 1

    # A later answer from Plane changes nothing and is told, on the work item, who decided.
    plane.human_comment(item, "/deny ap-7")
    told = await eventually(
        lambda: [t for t in _texts(plane, item) if "already decided" in t],
        what="the already-decided comment",
    )
    winner = "deny by alice via cli" if cli_won else f"approve by {HUMAN['display_name']} via plane"
    assert f"Approval ap-7 is already decided: {winner}." in told[-1]
    await eventually(lambda: answered() == 2, what="the late comment handled")
    assert len(await inbox(bus, run_id)) == 1


async def test_plane_decides_first_and_the_cli_is_told(
    bus: Bus, plane: FakePlane, sync: PlaneSyncApp
) -> None:
    item, run_id = await _asked_on_a_work_item(bus, plane, "Drop the cache", "ap-8")
    plane.human_comment(item, "/deny ap-8")
    await eventually(lambda: inbox(bus, run_id), what="Plane's decision")
    late = await asyncio.wait_for(
        claim_approval(bus.js, run_id, "ap-8", "approve", decided_by="alice", surface="cli"), 10
    )
    assert (late.won, late.decision, late.surface) == (False, "deny", "plane")
    assert late.decided_by == HUMAN["display_name"]
    assert len(await inbox(bus, run_id)) == 1


async def test_a_comment_from_someone_the_policy_leaves_out_is_refused(
    bus: Bus, plane: FakePlane, sync: PlaneSyncApp
) -> None:
    # ada files the work item, so she is the run's requester; bob is another workspace member.
    item, run_id = await _asked_on_a_work_item(bus, plane, "Rotate the keys", "ap-9")
    plane.human_comment(item, "/approve ap-9", actor=BOB)
    told = await eventually(
        lambda: [t for t in _texts(plane, item) if "may not decide" in t], what="the refusal"
    )
    assert "You may not decide approval ap-9: bob is not an approver of this run" in told[0]
    assert f"requester ({HUMAN['display_name']})" in told[0]
    refused = await eventually(lambda: run_events(bus, "approval_refused"), what="audited")
    event = refused[0].event
    assert isinstance(event, ApprovalRefused)
    assert (event.answered_by, event.surface, event.approval_id) == ("bob", "plane", "ap-9")
    assert await held_claim(bus.js, run_id, "ap-9") is None
    assert await inbox(bus, run_id) == []

    # The requester's own comment decides it.
    plane.human_comment(item, "/deny ap-9 not now")
    decisions = await eventually(lambda: inbox(bus, run_id), what="ada's decision")
    decision = decisions[0]
    assert isinstance(decision, ApprovalDecision)
    assert (decision.decision, decision.decided_by) == ("deny", HUMAN["display_name"])
    assert len(await run_events(bus, "approval_refused")) == 1
