"""Answering an approval the same way from every surface (CLI, console): who may decide, then
whether it is already settled, then the KV claim, then the decision on the run's inbox."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterable, Sequence
from datetime import datetime

from nexus_events.contract import subjects
from nexus_events.contract.approver_policy import Answer, Teams, Verdict, may_decide
from nexus_events.contract.runstate import is_terminal
from nexus_events.events import ApprovalDecision
from nexus_events.transport.approvals import (
    ApprovalRecord,
    claim_approval,
    decided_as,
    held_claim,
    record_refusal,
    release_approval,
    run_approvals,
)
from nexus_events.transport.bus import Bus


class AnswerRefusedError(Exception):
    """The approval's policy does not let this answer decide (the refusal is recorded)."""

    def __init__(self, approval_id: str, reason: str) -> None:
        super().__init__(f"you may not decide approval {approval_id}: {reason}")
        self.reason = reason


class AlreadySettledError(Exception):
    """Someone decided first (or the approval ended): `told` says who and where."""

    def __init__(self, approval_id: str, told: str) -> None:
        super().__init__(f"approval {approval_id} is already decided: {told}")
        self.told = told


async def refuse(bus: Bus, record: ApprovalRecord, decision: str, answer: Answer, why: str) -> None:
    """Record (audit) a refused answer on the run: each call is one answer."""
    verdict = Verdict(False, why)
    await record_refusal(bus, record, decision, answer, verdict, key=uuid.uuid4().hex)


async def check_may_decide(
    bus: Bus,
    record: ApprovalRecord,
    decision: str,
    answer: Answer,
    default: Sequence[str],
    *,
    teams: Teams | None = None,
) -> None:
    """Raise AnswerRefusedError, after recording the refusal, if the policy says no
    (`teams`: the deployment's NEXUS_TEAMS, who each team:<name> is)."""
    verdict = may_decide(record.policy(default, teams=teams), answer)
    if not verdict.allowed:
        await refuse(bus, record, decision, answer, verdict.reason)
        raise AnswerRefusedError(record.approval_id, verdict.reason)


async def settled_as(bus: Bus, record: ApprovalRecord, run_status: str) -> str | None:
    """How the approval was settled (``approve by slack:U1 via slack``), or None if open:
    the claim that decided it, else the runner's record (an expiry), else the run's end."""
    claim = await held_claim(bus.js, record.run_id, record.approval_id)
    if claim is not None:
        return claim.told()
    if record.decided is not None:
        d = record.decided
        return decided_as(d.decision, d.decided_by, d.surface)
    if is_terminal(run_status):
        return f"the run {run_status}"
    return None


async def claim_and_publish(
    bus: Bus,
    record: ApprovalRecord,
    decision: str,
    *,
    comment: str | None,
    who: str,
    surface: str,
) -> ApprovalDecision:
    """Claim the decision (exactly one surface wins: AlreadySettledError for the loser), then
    publish it on the run's inbox; a failed publish gives the claim back, so the approval is
    not left held by a decision nobody will read."""
    run_id, approval = record.run_id, record.approval_id
    claim = await claim_approval(
        bus.js, run_id, approval, decision, decided_by=who, surface=surface
    )
    if not claim.won:
        raise AlreadySettledError(approval, claim.told())
    decided = ApprovalDecision(
        approval_id=approval, decision=decision, decided_by=who, comment=comment, surface=surface
    )
    try:
        await bus.publish(
            subjects.inbox(run_id), decided, msg_id=f"{surface}:approval:{run_id}:{approval}"
        )
    except BaseException:
        with contextlib.suppress(Exception):
            await release_approval(bus.js, run_id, approval)
        raise
    return decided


async def answer_approval(
    bus: Bus,
    record: ApprovalRecord,
    run_status: str,
    decision: str,
    *,
    comment: str | None,
    answer: Answer,
    default: Sequence[str],
    teams: Teams | None = None,
) -> ApprovalDecision:
    """Decide an asked approval as `answer`: policy first (a refused answer is recorded even
    when late), then whether it is settled, then claim and publish."""
    await check_may_decide(bus, record, decision, answer, default, teams=teams)
    told = await settled_as(bus, record, run_status)
    if told is not None:
        raise AlreadySettledError(record.approval_id, told)
    return await claim_and_publish(
        bus, record, decision, comment=comment, who=answer.who, surface=answer.surface
    )


def is_pending(record: ApprovalRecord, now: datetime) -> bool:
    """Asked, undecided and unexpired: what `nexus approvals ls` and the console list."""
    return record.asked is not None and record.decided is None and record.asked.expires_at > now


async def pending_approvals(
    bus: Bus, run_ids: Iterable[str], now: datetime
) -> list[ApprovalRecord]:
    """The pending approvals of these runs (those awaiting approval, as core lists them)."""
    return [r for rid in run_ids for r in await run_approvals(bus, rid) if is_pending(r, now)]
