"""A ``/approve <id>`` or ``/deny <id>`` comment made a decision, if it is the first one.

Plane is one surface among chat, the CLI and a bare ``nats pub``: the comment claims the
approval (`nexus_events.approvals.claim_approval`, a KV create: one winner) before the
`ApprovalDecision` goes to the run's inbox. A comment that lost is answered on the work item
(a comment through the outbox, like every write) with the decision that won and by whom.

Before the claim, the comment's author must be an approver of the run
(`nexus_events.approver_policy`: by default the Plane user who asked for the run, or a
``plane:user:<id|email|name>`` the agent names). A refused comment is answered on the work
item with the reason, recorded as ``approval_refused``, and claims nothing.
"""

from __future__ import annotations

from typing import Any

from nexus_events import subjects
from nexus_events.approvals import approval_record, claim_approval, record_refusal
from nexus_events.approver_policy import PLANE, Answer, may_decide
from nexus_events.bus import Bus
from nexus_events.events import ApprovalDecision
from nexus_events.subjects import validate_token

from nexus_plane_sync import render
from nexus_plane_sync.decisions import Write
from nexus_plane_sync.store import OUTBOX_CHANNEL, PlaneStore, enqueue

SURFACE = PLANE


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
    actor: Any = None,
    default_approvers: tuple[str, ...],
) -> bool:
    """Claim, then publish the decision; True if this comment decided the approval.

    The claim's token is the comment: a redelivered webhook finishes its own claim instead of
    being told it lost to itself. Raises `InvalidSubject` for an approval id that cannot be
    one (the caller dead-letters the webhook) and nats errors while NATS is away (retried).
    `default_approvers` is the policy of agents that name none (NEXUS_APPROVERS_DEFAULT).
    """
    key = f"plane:comment:{comment_id}"
    validate_token(approval_id, "approval id")  # a bad id is the webhook's fault: dead letter
    person = plane_answer(actor, decided_by)
    record = await approval_record(bus, run_id, approval_id)
    verdict = may_decide(record.policy(default_approvers), person)
    if not verdict.allowed:
        await record_refusal(bus, record, decision, person, verdict, key=key)
        if task_id is not None:
            text = f"You may not decide approval {approval_id}: {verdict.reason}."
            await _notice(store, task_id, run_id, f"run:{run_id}:refused:{comment_id}", text)
        return False
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
        await _notice(store, task_id, run_id, f"run:{run_id}:already:{comment_id}", text)
    return False


def plane_answer(actor: Any, name: str | None) -> Answer:
    """The comment's author as the policy sees them: their display name (what `decided_by`
    says), with their Plane id and email as further names a `plane:user:` may use."""
    fields = actor if isinstance(actor, dict) else {}
    aliases = {str(fields[k]) for k in ("id", "email", "display_name") if fields.get(k)}
    if isinstance(actor, str):
        aliases.add(actor)
    who = name or next(iter(sorted(aliases)), "someone")
    return Answer(surface=SURFACE, who=who, aliases=frozenset(aliases - {who}))


async def _notice(store: PlaneStore, task_id: str, run_id: str, write_id: str, text: str) -> None:
    """A notice comment on the work item, through the outbox like every write."""
    write = Write(
        write_id,
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
