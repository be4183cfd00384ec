"""A ``/approve <id>`` or ``/deny <id>`` comment made a decision, if it is the first one.

Plane is one surface among chat, the CLI and a bare ``nats pub``: the comment claims the
approval (`nexus_events.transport.approvals.claim_approval`, a KV create: one winner) before the
`ApprovalDecision` goes to the run's inbox. A comment that lost is answered on the work item
(a comment through the outbox, like every write) with the decision that won and by whom.

Before the claim, the comment's author must be an approver of the run
(`nexus_events.contract.approver_policy`: by default the Plane user who asked for the run, or a
``plane:user:<id|email|name>`` or ``plane:role:<admin|member|guest>`` the agent names). A
refused comment is answered on the work item with the reason, recorded as
``approval_refused``, and claims nothing.

A flow's gate is answered the same way on the gate's pseudo-run (``gate_run_id``): its
policy is the gate's `approvers` (`GateStep.approvers`, else the default), with the flow
run's requester and origin as `requester` (`gate_policy`).

A role is the author's workspace role, asked of Plane only when the policy names a role
(`PlaneApi.workspace_role`, cached a minute). If Plane cannot say, the role is unknown: the
comment is judged without one, so a role principal refuses it, and the reason says why.
"""

from __future__ import annotations

from typing import Any

from nexus_events.contract import subjects
from nexus_events.contract.approver_policy import (
    PLANE,
    Answer,
    ApproverPolicy,
    Teams,
    Verdict,
    may_decide,
)
from nexus_events.contract.subjects import validate_token
from nexus_events.events import ApprovalDecision
from nexus_events.transport.approvals import (
    ApprovalRecord,
    approval_record,
    claim_approval,
    held_claim,
    record_refusal,
)
from nexus_events.transport.bus import Bus

from nexus_plane_sync import render
from nexus_plane_sync.decisions import Write
from nexus_plane_sync.errors import PlaneRejected, PlaneUnavailable
from nexus_plane_sync.plane_api import PlaneApi, role_names
from nexus_plane_sync.store import OUTBOX_CHANNEL, FlowGate, PlaneStore, enqueue

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
    api: PlaneApi | None = None,
    policy: ApproverPolicy | None = None,
    teams: Teams | None = None,
) -> bool:
    """Claim, then publish the decision; True if this comment decided the approval.

    The claim's token is the comment: a redelivered webhook finishes its own claim instead of
    being told it lost to itself. Raises `InvalidSubject` for an approval id that cannot be
    one (the caller dead-letters the webhook) and nats errors while NATS is away (retried).
    `default_approvers` is the policy of agents that name none (NEXUS_APPROVERS_DEFAULT);
    `api` answers the author's role when the policy names one. `policy` is given for a flow
    gate (`gate_policy`), whose pseudo-run has no request to read it from; `teams` are the
    deployment's (NEXUS_TEAMS, who each team:<name> is).
    """
    key = f"plane:comment:{comment_id}"
    validate_token(approval_id, "approval id")  # a bad id is the webhook's fault: dead letter
    if policy is None:
        record = await approval_record(bus, run_id, approval_id)
        policy = record.policy(default_approvers, teams=teams)
    else:
        validate_token(run_id, "run id")
        record = ApprovalRecord(run_id=run_id, approval_id=approval_id)
    roles, unknown = await author_roles(api, actor, policy)
    person = plane_answer(actor, decided_by, roles)
    verdict = may_decide(policy, person)
    if not verdict.allowed and unknown:
        verdict = Verdict(False, f"{verdict.reason}; {unknown}")
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


def gate_policy(
    gate: FlowGate, default_approvers: tuple[str, ...], teams: Teams | None = None
) -> ApproverPolicy:
    """Who may decide a flow's gate: its own approvers, else the default; `requester` is the
    person who asked for the flow run, on the surface they asked from."""
    named = gate.approvers
    return ApproverPolicy(
        principals=tuple(default_approvers if named is None else named),
        run_id=gate.gate_run_id,
        requester=gate.requested_by,
        origin_surface=gate.origin,
        from_agent=named is not None,
        teams=dict(teams or {}),
    )


async def author_roles(
    api: PlaneApi | None, actor: Any, policy: ApproverPolicy
) -> tuple[frozenset[str], str | None]:
    """The author's role names (`role_names`) if the policy names a ``plane:role:``, and why
    they are unknown if Plane could not say (None: known, or not needed)."""
    if api is None or not any(p.startswith("plane:role:") for p in policy.principals):
        return frozenset(), None
    user_id = actor.get("id") if isinstance(actor, dict) else actor
    if not isinstance(user_id, str) or not user_id:
        return frozenset(), "their Plane role is unknown (the comment names no user)"
    try:
        role = await api.workspace_role(user_id)
    except PlaneUnavailable:
        return frozenset(), "their Plane role is unknown (Plane is unreachable)"
    except PlaneRejected as exc:  # e.g. 403: the API key's user is a guest of the workspace
        refused = f"Plane refused the member list, {exc.status}"
        return frozenset(), f"their Plane role is unknown ({refused})"
    return role_names(role), None


def plane_answer(actor: Any, name: str | None, roles: frozenset[str] = frozenset()) -> Answer:
    """The comment's author as the policy sees them: their display name (what `decided_by`
    says), with their Plane id and email as further names a `plane:user:` may use, and their
    workspace `roles` for a `plane:role:`."""
    fields = actor if isinstance(actor, dict) else {}
    aliases = {str(fields[k]) for k in ("id", "email", "display_name") if fields.get(k)}
    if isinstance(actor, str):
        aliases.add(actor)
    who = name or next(iter(sorted(aliases)), "someone")
    return Answer(surface=SURFACE, who=who, aliases=frozenset(aliases - {who}), roles=roles)


async def gate_closed(
    bus: Bus, store: PlaneStore, gate: FlowGate, task_id: str, comment_id: str
) -> None:
    """Answer a comment on a gate that no longer waits (decided, expired, or its flow ended):
    nothing is claimed, the comment is told what became of it."""
    held = await held_claim(bus.js, gate.gate_run_id, gate.approval_id)
    told = f": {held.told()}" if held is not None else ""
    text = f"Gate {gate.approval_id} of flow {gate.flow or gate.flow_run_id} no longer waits{told}."
    write_id = f"run:{gate.gate_run_id}:closed:{comment_id}"
    await _notice(store, task_id, gate.gate_run_id, write_id, text)


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
