"""`nexus plane status|resync`: the Plane mirror (plane-sync) as it stands, and a full resync.

Both ask plane-sync over NATS (``nexus.plane.v1.status`` / ``.resync``). A resync queues a
work item write for every task (or the ones named) from plane-sync's tables: work items are
found by their external id and patched, so running it twice changes nothing more.
"""

from __future__ import annotations

from typing import Annotated, Any

import typer
from nexus_events.contract import subjects

from nexus_cli.client import Session, check_token
from nexus_cli.errors import CliError, ExitCode
from nexus_cli.options import Output, OutputOpt, globals_of, run
from nexus_cli.output import emit, message
from nexus_cli.target import resolve_target

IGNORED = "ignored:"  # plane-sync's key prefix of an ignored delivery's reason

app = typer.Typer(help="Plane, the human-facing board: plane-sync's status and a resync.")


async def _ask(s: Session, subject: str, body: dict[str, Any]) -> dict[str, Any]:
    try:
        return await s.query(subject, body)
    except CliError as exc:
        if exc.code is ExitCode.UNAVAILABLE and "nothing answers" in exc.message:
            exc.message = f"nothing answers {subject}: plane-sync is not running"
            exc.hint = "it runs when NEXUS_PLANE_URL is set (docs/plane.md)"
        raise


@app.command("status")
def status_cmd(ctx: typer.Context, output: OutputOpt = Output.TABLE) -> None:
    """Where plane-sync writes, whether Plane answers, writes queued/done/failed, webhooks
    (totals, kept across restarts) and the ignored ones by reason."""
    g = globals_of(ctx)

    async def body() -> None:
        async with Session(resolve_target(g), g.timeout) as s:
            reply = await _ask(s, subjects.PLANE_STATUS, {})
        hooks = reply.get("webhooks") or {}
        # Totals kept in plane-sync's database (a restart keeps them); an ignored delivery
        # is counted as "ignored:<reason>" and shown on its own line.
        ignored = {k.removeprefix(IGNORED): v for k, v in hooks.items() if k.startswith(IGNORED)}
        handled = {k: v for k, v in hooks.items() if not k.startswith(IGNORED)}
        rows = [
            ("plane", reply.get("plane_url")),
            ("workspace / project", f"{reply.get('workspace')} / {reply.get('project_id')}"),
            ("runs shown as", reply.get("mode")),
            ("plane reachable", "yes" if reply.get("plane_reachable") else "NO"),
            ("writes pending", reply.get("pending_writes")),
            ("writes done", reply.get("done_writes")),
            ("writes failed", reply.get("failed_writes")),
            ("edits coalesced", reply.get("coalesced_writes")),
            ("tasks", reply.get("tasks")),
            ("webhooks", _counts(handled)),
            ("webhooks ignored", _counts(ignored)),
            ("last error", reply.get("last_error") or "-"),
        ]
        emit(output, reply, ("", ""), rows)

    run(output, body)


def _counts(counts: dict[str, Any]) -> str:
    return ", ".join(f"{k} {v}" for k, v in sorted(counts.items())) or "none"


@app.command("resync")
def resync_cmd(
    ctx: typer.Context,
    task: Annotated[
        list[str] | None, typer.Option("--task", "-t", help="Only this task (repeatable).")
    ] = None,
    output: OutputOpt = Output.TABLE,
) -> None:
    """Write every task's work item again from plane-sync's tables (idempotent)."""
    g = globals_of(ctx)

    async def body() -> None:
        task_ids = [check_token(t, "task id") for t in task or []]
        async with Session(resolve_target(g), g.timeout) as s:
            reply = await _ask(s, subjects.PLANE_RESYNC, {"task_ids": task_ids})
        queued = int(reply.get("queued", 0))
        message(output, f"{queued} work item write(s) queued", reply)

    run(output, body)
