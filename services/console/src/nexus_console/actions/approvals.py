"""Deciding an approval from the console: the CLI's path (`approval_answers`), answering as
``console:<name>`` on the console surface, a read viewer's attempt refused and audited."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Literal

from nexus_events.contract import subjects
from nexus_events.contract.approver_policy import (
    CONSOLE,
    Answer,
    ApproverDefaults,
    ApproverPolicy,
    Teams,
)
from nexus_events.contract.runstate import RunStatus
from nexus_events.events import ApprovalDecision
from nexus_events.transport import approval_answers as answers
from nexus_events.transport.approvals import ApprovalRecord, approval_record
from nexus_events.transport.bus import Bus
from pydantic import BaseModel, ConfigDict, Field

from nexus_console.actions import READ_ONLY
from nexus_console.auth.identity import Viewer
from nexus_console.reads import QueryError, Reads


class DecisionForm(BaseModel):
    """The approve/deny form (its csrf field is the auth middleware's)."""

    model_config = ConfigDict(extra="ignore", str_strip_whitespace=True)

    decision: Literal["approve", "deny"]
    comment: str | None = Field(None, max_length=2000)


def console_answer(viewer: Viewer) -> Answer:
    # The token's scope is the answer's role: a console principal needs `operate`.
    return Answer(
        surface=CONSOLE,
        who=viewer.principal,
        aliases=frozenset({viewer.name}),
        roles=frozenset({viewer.scope.value}),
    )


def default_policy() -> tuple[str, ...]:
    # Read per answer, as the CLI does: NEXUS_APPROVERS_DEFAULT of this console.
    return ApproverDefaults().approvers_default


def deployment_teams() -> Teams:
    # Read per answer too: NEXUS_TEAMS, who each team:<name> of a policy is.
    return ApproverDefaults().teams


def policy_of(record: ApprovalRecord) -> ApproverPolicy:
    """Who may decide `record` as this console sees it: the default and the teams."""
    return record.policy(default_policy(), teams=deployment_teams())


async def asked_record(bus: Bus, run_id: str, approval_id: str) -> ApprovalRecord | None:
    """The approval if the run asked for it, else None (an unknown id: a 404)."""
    subjects.validate_token(run_id, "run id")
    subjects.validate_token(approval_id, "approval id")
    record = await approval_record(bus, run_id, approval_id)
    return record if record.asked is not None else None


async def run_status(reads: Reads, run_id: str) -> str:
    """The run's status as core has it; a flow gate's pseudo-run core may not know: open
    (its record and claim still say whether it is settled)."""
    try:
        row = await reads.query(subjects.CORE_RUNS_GET, {"run_id": run_id})
    except QueryError as exc:
        if exc.status == 404:
            return ""
        raise
    return str(row.get("status", ""))


async def refuse_read_viewer(
    bus: Bus, record: ApprovalRecord, decision: str, viewer: Viewer
) -> None:
    """A read viewer may not decide: recorded as an `approval_refused` like any refusal."""
    await answers.refuse(bus, record, decision, console_answer(viewer), READ_ONLY)


async def decide(
    bus: Bus, reads: Reads, record: ApprovalRecord, form: DecisionForm, viewer: Viewer
) -> ApprovalDecision:
    """Decide as `viewer`; raises answers.AnswerRefusedError / AlreadySettledError."""
    status = await run_status(reads, record.run_id)
    return await answers.answer_approval(
        bus,
        record,
        status,
        form.decision,
        comment=form.comment or None,
        answer=console_answer(viewer),
        default=default_policy(),
        teams=deployment_teams(),
    )


async def pending(bus: Bus, reads: Reads, limit: int) -> list[ApprovalRecord]:
    """Every pending approval, found as `nexus approvals ls` finds them: the runs core lists
    as awaiting approval (a waiting gate's pseudo-run among them), then their own events."""
    query = {"status": RunStatus.AWAITING_APPROVAL.value, "limit": limit}
    data = await reads.query(subjects.CORE_RUNS_LIST, query)
    run_ids = [r["run_id"] for r in data.get("runs", [])]
    return await answers.pending_approvals(bus, run_ids, datetime.now(UTC))
