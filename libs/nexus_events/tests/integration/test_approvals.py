"""The approval claim (NATS KV create) lets exactly one surface decide, on the real server."""

from __future__ import annotations

import asyncio

from nexus_events.transport.approvals import claim_approval
from nexus_events.transport.bus import Bus


async def test_concurrent_claims_have_one_winner_and_losers_learn_it(bus: Bus) -> None:
    claims = await asyncio.gather(
        *(
            claim_approval(
                bus.js,
                "run-1",
                "apr-1",
                "approve" if i % 2 else "deny",
                decided_by=f"p{i}",
                surface="slack" if i % 2 else "cli",
            )
            for i in range(8)
        )
    )
    winners = [c for c in claims if c.won]
    assert len(winners) == 1
    for loser in (c for c in claims if not c.won):
        assert (loser.decision, loser.decided_by) == (winners[0].decision, winners[0].decided_by)


async def test_claims_of_other_approvals_are_independent(bus: Bus) -> None:
    first = await claim_approval(bus.js, "run-1", "apr-1", "approve", decided_by="a", surface="x")
    other = await claim_approval(bus.js, "run-1", "apr-2", "deny", decided_by="b", surface="y")
    again = await claim_approval(bus.js, "run-1", "apr-1", "deny", decided_by="c", surface="z")
    assert first.won
    assert other.won
    assert not again.won
    assert again.decision == "approve"
    assert again.surface == "x"


async def test_the_same_claimant_token_wins_again_after_a_crash(bus: Bus) -> None:
    first = await claim_approval(
        bus.js, "run-2", "apr-1", "approve", decided_by="a", surface="slack", token="msg-1"
    )
    again = await claim_approval(
        bus.js, "run-2", "apr-1", "approve", decided_by="a", surface="slack", token="msg-1"
    )
    other = await claim_approval(
        bus.js, "run-2", "apr-1", "deny", decided_by="b", surface="slack", token="msg-2"
    )
    assert first.won
    assert again.won
    assert not other.won


async def test_a_released_claim_can_be_won_by_another_surface(bus: Bus) -> None:
    from nexus_events.transport.approvals import release_approval

    first = await claim_approval(bus.js, "run-3", "apr-1", "deny", decided_by="a", surface="cli")
    await release_approval(bus.js, "run-3", "apr-1")
    second = await claim_approval(
        bus.js, "run-3", "apr-1", "approve", decided_by="b", surface="slack"
    )
    assert first.won
    assert second.won
    assert second.decision == "approve"


async def test_a_flow_gate_is_asked_for_by_whoever_asked_for_its_flow(bus: Bus) -> None:
    """A gate's pseudo-run has no `requested`: its record takes the flow's requester and the
    gate step's approvers from the flow run's events, so the CLI's policy check can pass."""
    from datetime import UTC, datetime, timedelta

    from nexus_events.contract import subjects
    from nexus_events.contract.approver_policy import CLI, Answer, may_decide
    from nexus_events.events import (
        ApprovalRequested,
        FlowAccepted,
        FlowDefinition,
        FlowRequested,
        Origin,
    )
    from nexus_events.transport.approvals import FLOW_GATE_TOOL, run_approvals

    definition = FlowDefinition.model_validate(
        {
            "id": "ship",
            "steps": [
                {"id": "ok", "kind": "gate", "summary": "ship?"},
                {"id": "sure", "kind": "gate", "summary": "really?", "approvers": ["nats:bob"]},
            ],
        }
    )
    await bus.publish(
        subjects.flow_event("fl-1", "requested"),
        FlowRequested(flow="ship", origin=Origin.CLI, requested_by="alice"),
    )
    await bus.publish(
        subjects.flow_event("fl-1", "accepted"),
        FlowAccepted(flow="ship", revision=1, definition=definition),
    )
    until = datetime.now(UTC) + timedelta(hours=1)
    for run_id, approval_id in (
        ("fl-1-ok-r1", "gate-ok-r1"),
        ("fl-1-sure-r2", "gate-sure-r2"),
        ("fl-2-ok-r1", "gate-ok-r1"),  # no such flow run
    ):
        await bus.publish(
            subjects.run_event(run_id, "approval_requested"),
            ApprovalRequested(
                approval_id=approval_id, tool=FLOW_GATE_TOOL, summary="?", expires_at=until
            ),
        )
    alice = Answer(surface=CLI, who="nats:alice", aliases=frozenset({"alice"}))

    [ok] = await run_approvals(bus, "fl-1-ok-r1")
    assert ok.requested is not None
    assert ok.requested.requested_by == "alice"
    assert ok.agent_approvers is None
    assert may_decide(ok.policy(("requester",)), alice).allowed

    [sure] = await run_approvals(bus, "fl-1-sure-r2")
    assert sure.agent_approvers == ("nats:bob",)
    assert not may_decide(sure.policy(("requester",)), alice).allowed

    [unknown] = await run_approvals(bus, "fl-2-ok-r1")
    assert unknown.requested is None
    assert not may_decide(unknown.policy(("requester",)), alice).allowed
