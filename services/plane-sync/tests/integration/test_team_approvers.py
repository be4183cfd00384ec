"""``team:<name>`` approvers in Plane (docs/spend.md), on real NATS + PostgreSQL with the fake
Plane: a member of the team (NEXUS_TEAMS, as plane:user:<email>) decides with ``/approve``; a
non-member is refused, told the team and its members, and audited."""

from __future__ import annotations

from nexus_events.contract import subjects
from nexus_events.contract.runstate import RunEvent
from nexus_events.events import (
    ApprovalDecision,
    ApprovalRefused,
    ModelSpec,
    Permissions,
    RunConfig,
    RunPrepared,
    RunRequested,
)
from nexus_events.transport.bus import Bus
from nexus_testing import eventually
from tests.fakes.plane import FakePlane
from tests.support.plane_sync import ask_approval, inbox, run_events, start_run

BOB = {"id": "bob-user", "display_name": "bob", "email": "bob@example.com"}
CAROL = {"id": "carol-user", "display_name": "carol", "email": "carol@example.com"}


def _texts(plane: FakePlane, item: str) -> list[str]:
    return [c["comment_html"] for c in plane.comments_of(item)]


async def test_a_team_member_decides_and_a_non_member_is_refused_naming_the_team(
    bus: Bus, plane: FakePlane, make_sync: object
) -> None:
    await make_sync(teams='{"alpha": ["plane:user:carol@example.com"]}')  # type: ignore[operator]
    item = plane.human_create_work_item("Spend the budget", labels=["agent:ops"])
    requested = await eventually(lambda: run_events(bus, "requested"), what="run requested")
    assert isinstance(requested[0].event, RunRequested)
    run_id = requested[0].address.run_id
    assert run_id is not None
    config = RunConfig(
        run_id=run_id,
        agent_id="ops",
        system_prompt="You work for team alpha.",
        model=ModelSpec(name="m"),
        permissions=Permissions(approvers=["team:alpha"]),
    )
    await bus.publish(subjects.run_event(run_id, RunEvent.PREPARED), RunPrepared(config=config))
    await start_run(bus, run_id)
    await ask_approval(bus, run_id, "ap-t")
    await eventually(
        lambda: any("/approve ap-t" in t for t in _texts(plane, item)), what="the approval ask"
    )

    plane.human_comment(item, "/approve ap-t", actor=BOB)
    told = await eventually(
        lambda: [t for t in _texts(plane, item) if "may not decide" in t], what="the refusal"
    )
    assert "bob is not an approver of this run" in told[0]
    assert "team:alpha (plane:user:carol@example.com)" in told[0]
    refused = await eventually(lambda: run_events(bus, "approval_refused"), what="audited")
    assert isinstance(refused[0].event, ApprovalRefused)
    assert refused[0].event.answered_by == "bob"
    assert await inbox(bus, run_id) == []

    plane.human_comment(item, "/approve ap-t", actor=CAROL)
    decisions = await eventually(lambda: inbox(bus, run_id), what="carol's decision")
    assert isinstance(decisions[0], ApprovalDecision)
    assert (decisions[0].decision, decisions[0].decided_by) == ("approve", "carol")
