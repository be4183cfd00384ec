"""`nexus approvals ls`, and the CLI's side of the approver policy (docs/approvals.md).

The CLI answers as its NATS identity, ``nats:<user>``: the user of the connection
(``NEXUS_NATS_USER``, or the user in the NATS URL), else, on a connection without one (the dev
stack), the operating-system user. The check is advisory: whoever may publish on
``agent.inbox.v1.<run>`` can bypass it, so only NATS permissions make it binding.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any
from urllib.parse import urlparse

import typer
from nexus_events.contract import subjects
from nexus_events.contract.approver_policy import CLI, Answer, ApproverDefaults
from nexus_events.contract.runstate import RunStatus
from nexus_events.transport import approval_answers as answers
from nexus_events.transport.approvals import ApprovalRecord
from nexus_events.transport.bus import BusSettings

from nexus_cli.client import Session, check_token, whoami
from nexus_cli.errors import CliError, ExitCode
from nexus_cli.options import Output, OutputOpt, globals_of, run
from nexus_cli.output import emit
from nexus_cli.target import Target, resolve_target

app = typer.Typer(help="Approvals waiting for a person, and who may decide each.")
# Most runs `approvals ls` looks at: one page of core's runs.list (its MAX_PAGE).
MAX_RUNS = 500


def cli_user(target: Target) -> str:
    """The user the CLI answers as (without the ``nats:`` prefix)."""
    configured = BusSettings(url=target.nats_url).user
    if configured:
        return configured
    for url in target.nats_url.split(","):
        user = urlparse(url.strip()).username
        if user:
            return user
    return whoami()


def cli_answer(target: Target) -> Answer:
    user = cli_user(target)
    return Answer(surface=CLI, who=f"nats:{user}", aliases=frozenset({user}))


def default_policy() -> tuple[str, ...]:
    # Read per command (not cached): NEXUS_APPROVERS_DEFAULT of this invocation.
    return ApproverDefaults().approvers_default


async def check_may_decide(
    s: Session, record: ApprovalRecord, decision: str, answer: Answer | None = None
) -> None:
    """Refuse (exit 6) an answer the approval's policy does not allow, after recording the
    refusal (`approval_refused`) on the run; nothing is claimed. `answer`: who answers (the
    CLI's own identity unless given)."""
    answer = answer or cli_answer(s.target)
    try:
        await s.publish_guarded(
            answers.check_may_decide(
                s.bus, record, decision, answer, default_policy(), teams=ApproverDefaults().teams
            )
        )
    except answers.AnswerRefusedError as exc:
        raise CliError(
            str(exc),
            hint="the agent's `permissions.approvers` or NEXUS_APPROVERS_DEFAULT say who may"
            " (docs/approvals.md)",
            code=ExitCode.REFUSED,
        ) from None


async def settled_as(s: Session, record: ApprovalRecord, status: str) -> str | None:
    """How the approval was settled, or None if open (`approval_answers.settled_as`)."""
    return await answers.settled_as(s.bus, record, status)


def _row(record: ApprovalRecord) -> dict[str, Any]:
    asked = record.asked
    assert asked is not None  # only asked approvals are listed
    return {
        "run_id": record.run_id,
        "approval_id": record.approval_id,
        "agent_id": record.agent_id,
        "tool": asked.tool,
        "summary": asked.summary,
        "expires_at": asked.expires_at.isoformat(),
        "may_decide": list(record.policy(default_policy()).principals),
        "requester": record.requested.requested_by if record.requested else None,
        "policy": "agent" if record.agent_approvers is not None else "default",
    }


async def pending_approvals(s: Session, run_id: str | None) -> list[dict[str, Any]]:
    """Pending approvals (asked, undecided, unexpired): of one run (exit 3 if there is no such
    run), or of every run awaiting approval."""
    if run_id is not None:
        check_token(run_id, "run id")
        await s.get_run(run_id)
        run_ids = [run_id]
    else:
        query = {"status": RunStatus.AWAITING_APPROVAL.value, "limit": MAX_RUNS}
        data = await s.query(subjects.CORE_RUNS_LIST, query)
        run_ids = [r["run_id"] for r in data.get("runs", [])]
    return [_row(r) for r in await answers.pending_approvals(s.bus, run_ids, datetime.now(UTC))]


@app.command("ls")
def ls_cmd(
    ctx: typer.Context,
    run_id: Annotated[str | None, typer.Option("--run", help="Only this run's approvals.")] = None,
    output: OutputOpt = Output.TABLE,
) -> None:
    """Pending approvals (asked, undecided, unexpired) and who may decide each."""
    g = globals_of(ctx)

    async def body() -> None:
        async with Session(resolve_target(g), g.timeout) as s:
            rows = await pending_approvals(s, run_id)
        emit(
            output,
            {"approvals": rows},
            ("RUN", "APPROVAL", "AGENT", "TOOL", "EXPIRES", "MAY DECIDE"),
            [
                (
                    r["run_id"],
                    r["approval_id"],
                    r["agent_id"] or "",
                    r["tool"],
                    r["expires_at"][11:16] + " UTC",
                    ", ".join(
                        f"requester ({r['requester']})"
                        if p == "requester" and r["requester"]
                        else p
                        for p in r["may_decide"]
                    ),
                )
                for r in rows
            ],
            empty="no approval is waiting",
        )

    run(output, body)
