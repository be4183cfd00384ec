"""Deciding an approval the way `nexus approve|deny` does once its checks passed: claim it
(`nexus_events.transport.approvals`), then publish the decision if the claim won. For tests
that race another surface (chat, Plane) against the CLI without a core to answer the CLI's
checks."""

from __future__ import annotations

from nexus_events.contract import subjects
from nexus_events.events import ApprovalDecision
from nexus_events.transport.approvals import claim_approval
from nexus_events.transport.bus import Bus


async def cli_decides(bus: Bus, run_id: str, approval_id: str, decision: str) -> bool:
    """Claim as "alice" on the CLI surface; True if the CLI's decision is the one that counts."""
    claim = await claim_approval(
        bus.js, run_id, approval_id, decision, decided_by="alice", surface="cli"
    )
    if claim.won:
        await bus.publish(
            subjects.inbox(run_id),
            ApprovalDecision(
                approval_id=approval_id, decision=decision, decided_by="alice", surface="cli"
            ),
            msg_id=f"cli:approval:{run_id}:{approval_id}",
        )
    return claim.won
