"""A ``/approve <id>`` or ``/deny <id>`` comment made a decision, if it is the first one.

Plane is one surface among chat, the CLI and a bare ``nats pub``: the comment claims the
approval (`nexus_events.approvals.claim_approval`, a KV create: one winner) before the
`ApprovalDecision` goes to the run's inbox. A comment that lost is answered on the work item
(a comment through the outbox, like every write) with the decision that won and by whom.
"""

from __future__ import annotations

from nexus_events import subjects
from nexus_events.approvals import claim_approval
from nexus_events.bus import Bus
from nexus_events.events import ApprovalDecision

from nexus_plane_sync import render
from nexus_plane_sync.decisions import Write
from nexus_plane_sync.store import OUTBOX_CHANNEL, PlaneStore, enqueue

SURFACE = "plane"


async def answer_approval(
    bus: Bus,
    store: PlaneStore,
    *,
    run_id: str,
    task_id: str | None,
    approval_id: str,
    decision: str,
    decided_by: str | None,
    note: str | None,
    comment_id: str,
) -> bool:
    """Claim, then publish the decision; True if this comment decided the approval.

    The claim's token is the comment: a redelivered webhook finishes its own claim instead of
    being told it lost to itself. Raises `InvalidSubject` for an approval id that cannot be
    one (the caller dead-letters the webhook) and nats errors while NATS is away (retried).
    """
    key = f"plane:comment:{comment_id}"
    claim = await claim_approval(
        bus.js, run_id, approval_id, decision, decided_by=decided_by, surface=SURFACE, token=key
    )
    if claim.won:
        await bus.publish(
            subjects.inbox(run_id),
            ApprovalDecision(
                approval_id=approval_id,
                decision="approve" if decision == "approve" else "deny",
                decided_by=decided_by,
                comment=note,
                surface=SURFACE,
            ),
            msg_id=key,
        )
        return True
    if task_id is not None:
        text = f"Approval {approval_id} is already decided: {claim.told()}."
        write = Write(
            f"run:{run_id}:already:{comment_id}",
            "run_report",
            task_id,
            run_id,
            payload={
                "kind": "notice", "html": render.paragraphs(text),
                "activity": "thought", "body": text,
            },
        )  # fmt: skip
        async with store.pool.acquire() as conn, conn.transaction():
            if await enqueue(conn, store.schema, [write], None):
                await conn.execute(f"NOTIFY {OUTBOX_CHANNEL}")
    return False
