"""`/approve` in Plane claims the approval like every other surface, on real NATS +
PostgreSQL with the fake Plane: answered at once from Plane and the CLI, the run gets exactly
one decision; a comment that lost is told on the work item who decided."""

from __future__ import annotations

import asyncio

from nexus_events.approvals import claim_approval
from nexus_events.bus import Bus
from nexus_events.events import ApprovalDecision, RunRequested
from nexus_events.testing import eventually
from tests.fakes.plane import HUMAN, FakePlane
from tests.support.approvals import cli_decides
from tests.support.plane_sync import ask_approval, inbox, run_events, start_run

from nexus_plane_sync.app import PlaneSyncApp


def _texts(plane: FakePlane, item: str) -> list[str]:
    return [c["comment_html"] for c in plane.comments_of(item)]


async def test_plane_and_the_cli_answering_at_once_make_one_decision(
    bus: Bus, plane: FakePlane, sync: PlaneSyncApp
) -> None:
    item = plane.human_create_work_item("Restart the API", labels=["agent:ops"])
    requested = await eventually(lambda: run_events(bus, "requested"), what="run requested")
    assert isinstance(requested[0].event, RunRequested)
    run_id = requested[0].address.run_id
    assert run_id is not None
    await start_run(bus, run_id)
    await ask_approval(bus, run_id, "ap-7")
    await eventually(
        lambda: any("/approve ap-7" in t for t in _texts(plane, item)), what="the approval ask"
    )

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
    item = plane.human_create_work_item("Drop the cache", labels=["agent:ops"])
    requested = await eventually(lambda: run_events(bus, "requested"), what="run requested")
    run_id = requested[0].address.run_id
    assert run_id is not None
    await start_run(bus, run_id)
    await ask_approval(bus, run_id, "ap-8")
    # A person answers what they see: the ask on the work item (so plane-sync knows the run).
    await eventually(
        lambda: any("/approve ap-8" in t for t in _texts(plane, item)), what="the approval ask"
    )
    plane.human_comment(item, "/deny ap-8")
    await eventually(lambda: inbox(bus, run_id), what="Plane's decision")
    late = await asyncio.wait_for(
        claim_approval(bus.js, run_id, "ap-8", "approve", decided_by="alice", surface="cli"), 10
    )
    assert (late.won, late.decision, late.surface) == (False, "deny", "plane")
    assert late.decided_by == HUMAN["display_name"]
    assert len(await inbox(bus, run_id)) == 1
