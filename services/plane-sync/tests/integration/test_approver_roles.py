"""``plane:role:<role>`` approvers (issue 30), on real NATS + PostgreSQL with the fake Plane:
plane-sync asks Plane for the comment author's workspace role (the member list, cached), so an
agent whose policy is ``plane:role:admin`` is decided by an admin's ``/approve`` and not by a
member's, which is refused, told why and audited; if Plane cannot say, the role is unknown and
a role principal refuses, saying so."""

from __future__ import annotations

from nexus_events.contract import subjects
from nexus_events.contract.approver_policy import ApproverPolicy
from nexus_events.events import (
    ApprovalDecision,
    ApprovalRefused,
    ModelSpec,
    Permissions,
    RunConfig,
    RunPrepared,
    RunRequested,
)
from nexus_events.transport.approvals import held_claim
from nexus_events.transport.bus import Bus
from nexus_testing import eventually
from tests.fakes.plane import ADMIN, MEMBER, FakePlane
from tests.support.plane_sync import ask_approval, inbox, run_events, start_run

from nexus_plane_sync.answers import author_roles
from nexus_plane_sync.app import PlaneSyncApp
from nexus_plane_sync.plane_api import PlaneApi
from nexus_plane_sync.ratelimit import TokenBucket

BOB = {"id": "bob-user", "display_name": "bob", "email": "bob@example.com"}
CAROL = {"id": "carol-user", "display_name": "carol", "email": "carol@example.com"}
ADMINS_ONLY = ApproverPolicy(principals=("plane:role:admin",), from_agent=True)


def _texts(plane: FakePlane, item: str) -> list[str]:
    return [c["comment_html"] for c in plane.comments_of(item)]


def _member_lists(plane: FakePlane) -> int:
    path = f"/api/v1/workspaces/{plane.workspace}/members/"
    return sum(1 for method, p, _ in plane.calls if (method, p) == ("GET", path))


async def _asked_by_an_admins_only_agent(bus: Bus, plane: FakePlane) -> tuple[str, str]:
    """ada files a work item for `ops`, whose definition names only Plane admins as
    approvers; its run asks for ``ap-r``. (item, run id)"""
    item = plane.human_create_work_item("Rotate the keys", labels=["agent:ops"])
    requested = await eventually(lambda: run_events(bus, "requested"), what="run requested")
    assert isinstance(requested[0].event, RunRequested)
    run_id = requested[0].address.run_id
    assert run_id is not None
    config = RunConfig(
        run_id=run_id,
        agent_id="ops",
        system_prompt="You run production.",
        model=ModelSpec(name="m"),
        permissions=Permissions(approvers=["plane:role:admin"]),
    )
    await bus.publish(subjects.run_event(run_id, "prepared"), RunPrepared(config=config))
    await start_run(bus, run_id)
    await ask_approval(bus, run_id, "ap-r")
    await eventually(
        lambda: any("/approve ap-r" in t for t in _texts(plane, item)), what="the approval ask"
    )
    return item, run_id


async def test_a_member_is_refused_and_an_admin_decides(
    bus: Bus, plane: FakePlane, sync: PlaneSyncApp
) -> None:
    plane.set_role(BOB, MEMBER)
    plane.set_role(CAROL, ADMIN)
    item, run_id = await _asked_by_an_admins_only_agent(bus, plane)

    plane.human_comment(item, "/approve ap-r", actor=BOB)
    told = await eventually(
        lambda: [t for t in _texts(plane, item) if "may not decide" in t], what="the refusal"
    )
    assert "bob is not an approver of this run" in told[0]
    assert "policy allows: plane:role:admin" in told[0]
    assert "unknown" not in told[0]  # Plane answered: bob is a member, not an admin
    refused = await eventually(lambda: run_events(bus, "approval_refused"), what="audited")
    event = refused[0].event
    assert isinstance(event, ApprovalRefused)
    assert (event.answered_by, event.surface, event.approval_id) == ("bob", "plane", "ap-r")
    assert await held_claim(bus.js, run_id, "ap-r") is None
    assert await inbox(bus, run_id) == []

    plane.human_comment(item, "/approve ap-r go ahead", actor=CAROL)
    decisions = await eventually(lambda: inbox(bus, run_id), what="carol's decision")
    decision = decisions[0]
    assert isinstance(decision, ApprovalDecision)
    assert (decision.decision, decision.decided_by, decision.surface) == (
        "approve",
        "carol",
        "plane",
    )
    assert len(await run_events(bus, "approval_refused")) == 1
    # Two comments within the cache's minute: Plane was asked for its members once.
    assert _member_lists(plane) == 1


async def test_an_unknown_role_refuses_and_says_why(plane: FakePlane) -> None:
    """Plane away: even an admin's role cannot be known, so a role principal cannot match."""
    api = PlaneApi(
        plane.url, plane.api_key, plane.workspace, plane.project_id,
        bucket=TokenBucket(rate=1000, burst=100), retries=1, retry_max=0.05, timeout=2.0,
    )  # fmt: skip
    plane.down = True
    try:
        roles, unknown = await author_roles(api, {"id": plane.bot["id"]}, ADMINS_ONLY)
        assert roles == frozenset()
        assert unknown == "their Plane role is unknown (Plane is unreachable)"
    finally:
        await api.close()
