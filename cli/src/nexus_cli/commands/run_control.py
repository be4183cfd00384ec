"""Steering a run under way: `nexus cancel`, `nexus run wake` (a sleeping run), and settling
its approvals with `nexus approve` and `nexus deny` (only as an approver the approval's policy
allows: `commands.approvals`)."""

from __future__ import annotations

import time
from typing import Annotated, Any

import typer
from nexus_events.contract import subjects
from nexus_events.contract.approver_policy import Answer
from nexus_events.contract.runstate import RunEvent, RunStatus, is_terminal
from nexus_events.events import CancelRequested, RunWakeRequested
from nexus_events.transport.approval_answers import AlreadySettledError, claim_and_publish
from nexus_events.transport.approvals import approval_record

from nexus_cli.client import Session, check_token, whoami
from nexus_cli.commands.approvals import check_may_decide, cli_answer, cli_user, settled_as
from nexus_cli.commands.runs import watch_run
from nexus_cli.errors import CliError, ExitCode
from nexus_cli.options import Output, OutputOpt, RunArg, globals_of, run
from nexus_cli.output import message
from nexus_cli.target import resolve_target

CommentOpt = Annotated[str | None, typer.Option("--comment", "-m", help="A note for the agent.")]
ApprovalArg = Annotated[str, typer.Argument(metavar="APPROVAL", help="Approval id.")]


def already_decided(approval: str, told: str) -> CliError:
    """The loser's line, as chat and Plane tell it: who decided and where (exit 2)."""
    return CliError(f"approval {approval} is already decided: {told}", code=ExitCode.INVALID)


async def request_cancel(
    s: Session, run_id: str, reason: str, requested_by: str, msg_prefix: str = "cli"
) -> dict[str, Any]:
    """Ask a run to stop; what happened (``cancel_requested`` False if it had already ended).
    Exit 3 (CliError) if there is no such run."""
    check_token(run_id, "run id")
    row = await s.get_run(run_id)
    if is_terminal(row["status"]):
        return {"run_id": run_id, "status": row["status"], "cancel_requested": False}
    await s.publish_guarded(
        s.bus.publish(
            subjects.run_event(run_id, RunEvent.CANCEL_REQUESTED),
            CancelRequested(reason=reason, requested_by=requested_by),
            msg_id=f"{msg_prefix}:cancel:{run_id}",
        )
    )
    return {"run_id": run_id, "status": row["status"], "cancel_requested": True}


async def request_wake(
    s: Session, run_id: str, reason: str, requested_by: str, msg_prefix: str = "cli"
) -> dict[str, Any]:
    """Ask a sleeping run to wake now (the scheduler starts its next attempt). CliError: exit
    3 if there is no such run, 1 if it does not sleep (a wake would change nothing)."""
    row = await s.get_run(run_id)
    if row["status"] != RunStatus.SLEEPING:
        raise CliError(f"run {run_id} is not sleeping: {row['status']}", code=ExitCode.RUN_FAILED)
    await s.publish_guarded(
        s.bus.publish(
            subjects.run_event(run_id, RunEvent.WAKE_REQUESTED),
            RunWakeRequested(reason=reason, requested_by=requested_by),
            # One wake per sleep: asking twice for the same sleep stores it once.
            msg_id=f"{msg_prefix}:wake:{run_id}:{row.get('attempt', 1)}",
        )
    )
    return {
        "run_id": run_id,
        RunEvent.WAKE_REQUESTED.value: True,
        "sleeping_until": row.get("sleeping_until"),
    }


async def decide_approval(
    s: Session,
    run_id: str,
    approval: str,
    decision: str,
    comment: str | None,
    *,
    who: str,
    answer: Answer,
    surface: str = "cli",
) -> None:
    """Settle an approval the run waits on, as `answer` allows (approver policy), through the
    KV claim so exactly one surface decides; CliError (one line) otherwise."""
    check_token(run_id, "run id")
    check_token(approval, "approval id")
    if decision not in ("approve", "deny"):
        raise CliError(f"decision must be approve or deny, not {decision!r}", code=ExitCode.INVALID)
    row = await s.get_run(run_id)
    record = await approval_record(s.bus, run_id, approval)
    if record.asked is None:
        raise CliError(
            f"run {run_id} has no approval {approval!r}",
            hint=f"`nexus approvals ls --run {run_id}` shows pending approvals",
            code=ExitCode.NOT_FOUND,
        )
    # Who may decide comes first: a refused answer is recorded even when late.
    await check_may_decide(s, record, decision, answer)
    told = await settled_as(s, record, row["status"])
    if told is not None:
        raise already_decided(approval, told)
    try:
        await s.publish_guarded(
            claim_and_publish(s.bus, record, decision, comment=comment, who=who, surface=surface)
        )
    except AlreadySettledError as exc:
        raise already_decided(approval, exc.told) from None


def register(app: typer.Typer) -> None:
    """Register `cancel`, `approve` and `deny` (in that order: `nexus --help` lists them so)."""

    @app.command("cancel")
    def cancel_cmd(
        ctx: typer.Context,
        run_id: RunArg,
        reason: Annotated[
            str, typer.Option(help="Reason code recorded on the run.")
        ] = "user_requested",
        wait: Annotated[bool, typer.Option("--wait", help="Wait until the run has ended.")] = False,
        output: OutputOpt = Output.TABLE,
    ) -> None:
        """Ask the run to stop (cancel_requested); --wait until it has (exit 0 once ended)."""
        g = globals_of(ctx)

        async def body() -> None:
            check_token(run_id, "run id")
            async with Session(resolve_target(g), g.timeout) as s:
                done = await request_cancel(s, run_id, reason, whoami())
                if not done["cancel_requested"]:
                    message(output, f"run {run_id} already ended: {done['status']}", done)
                    return
                if not wait:
                    message(
                        output,
                        f"cancel requested for {run_id}",
                        {"run_id": run_id, "cancel_requested": True},
                    )
                    return
                view = await watch_run(
                    s, run_id, Output.JSON, deadline=time.monotonic() + 60, live=False
                )
            message(output, f"run {run_id} ended: {view.status}", view.as_dict())

        run(output, body)

    def decide(
        ctx: typer.Context,
        run_id: str,
        approval: str,
        decision: str,
        comment: str | None,
        output: Output,
    ) -> None:
        g = globals_of(ctx)

        async def body() -> None:
            check_token(run_id, "run id")
            check_token(approval, "approval id")
            async with Session(resolve_target(g), g.timeout) as s:
                await decide_approval(
                    s,
                    run_id,
                    approval,
                    decision,
                    comment,
                    who=cli_user(s.target),
                    answer=cli_answer(s.target),
                )
            verb = "approved" if decision == "approve" else "denied"
            message(
                output,
                f"{verb} {approval} on {run_id}",
                {"run_id": run_id, "approval_id": approval, "decision": decision},
            )

        run(output, body)

    @app.command("approve")
    def approve_cmd(
        ctx: typer.Context,
        run_id: RunArg,
        approval: ApprovalArg,
        comment: CommentOpt = None,
        output: OutputOpt = Output.TABLE,
    ) -> None:
        """Approve a gated tool call the run is waiting on."""
        decide(ctx, run_id, approval, "approve", comment, output)

    @app.command("deny")
    def deny_cmd(
        ctx: typer.Context,
        run_id: RunArg,
        approval: ApprovalArg,
        comment: CommentOpt = None,
        output: OutputOpt = Output.TABLE,
    ) -> None:
        """Deny a gated tool call the run is waiting on."""
        decide(ctx, run_id, approval, "deny", comment, output)


def register_wake(app: typer.Typer) -> None:
    """Register `wake` (`nexus run wake`, routed by the root group: `nexus_cli.main`)."""

    @app.command("wake")
    def wake_cmd(
        ctx: typer.Context,
        run_id: RunArg,
        reason: Annotated[
            str, typer.Option("--reason", help="Told to the agent when it wakes.")
        ] = "",
        output: OutputOpt = Output.TABLE,
    ) -> None:
        """Wake a sleeping run now (wake_requested); exit 1 if it does not sleep.

        The scheduler starts the run's next attempt as soon as a slot is free instead of at its
        wake time, and tells the agent it was woken, with REASON.
        """
        g = globals_of(ctx)

        async def body() -> None:
            check_token(run_id, "run id")
            async with Session(resolve_target(g), g.timeout) as s:
                done = await request_wake(s, run_id, reason, whoami())
            message(output, f"wake requested for {run_id}", done)

        run(output, body)
