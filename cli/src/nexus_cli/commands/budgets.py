"""`nexus budgets apply|delete|ls|show|history`: budgets (docs/spend.md).

Budgets are catalog items (NEXUS_CATALOG, kind `budget`): apply, delete and history read and
write the catalog; ls and show ask the spend service (``nexus.spend.v1.budgets.list|get``) for
each budget's standing in the current period.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from nexus_events.contract import subjects
from nexus_events.contract.streams import CATALOG
from nexus_events.contract.subjects import CatalogKind
from nexus_events.events.budgets import BudgetDefinition, OnExceed
from nexus_events.events.spend import BudgetGet, BudgetsList, BudgetsReply, BudgetView
from nexus_events.transport.catalog_commands import apply_budget, delete_budget
from pydantic import ValidationError

from nexus_cli.apply_sources import PathsArg, apply_paths, file_option
from nexus_cli.budget_documents import load_budgets
from nexus_cli.client import Session, check_token, whoami
from nexus_cli.errors import CliError, ExitCode
from nexus_cli.options import Output, OutputOpt, globals_of, run
from nexus_cli.output import console, emit, message, print_json, table
from nexus_cli.spendview import (
    SPEND,
    budget_row,
    left_text,
    limits_text,
    reserved_text,
    spent_text,
    usd,
)
from nexus_cli.target import resolve_target

app = typer.Typer(
    help="Budgets: apply, delete, ls, show, history (docs/spend.md).", no_args_is_help=True
)

FileOpt = Annotated[list[Path] | None, file_option("A budget YAML file or a directory of them")]
BudgetArg = Annotated[str, typer.Argument(metavar="ID", help="Budget id.")]
LS_COLUMNS = ("ID", "SCOPE", "PERIOD", "LIMITS", "ON EXCEED", "SPENT / RESERVED / LIMIT", "STATE")
SHOW_COLUMNS = ("SCOPE", "PERIOD", "SPENT", "RESERVED", "LEFT", "RUNS", "STATE", "ASK")


@app.command("apply")
def apply_cmd(
    ctx: typer.Context,
    file: FileOpt = None,
    paths: PathsArg = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Validate only; publish nothing.")
    ] = False,
    output: OutputOpt = Output.TABLE,
) -> None:
    """Validate every budget first (one line "FILE: field: message", exit 2, nothing sent),
    then publish each as the budget's next revision."""
    g = globals_of(ctx)

    async def body() -> None:
        loaded = load_budgets(apply_paths(file, paths))
        if not dry_run:
            async with Session(resolve_target(g), g.timeout) as s:
                for item in loaded:
                    await s.publish_guarded(apply_budget(s.bus, item.document, applied_by=whoami()))
        done = "valid" if dry_run else "applied"
        items = [{"id": x.document.id, "file": str(x.path)} for x in loaded]
        if output is Output.JSON:
            print_json({done: items})
            return
        for a in items:
            console.print(f"budget/{a['id']} {done} ({a['file']})", markup=False)

    run(output, body)


@app.command("delete")
def delete_cmd(ctx: typer.Context, budget: BudgetArg, output: OutputOpt = Output.TABLE) -> None:
    """Delete a budget: it covers no run from now on (its revisions stay in the catalog)."""
    g = globals_of(ctx)

    async def body() -> None:
        check_token(budget, "budget id")
        async with Session(resolve_target(g), g.timeout) as s:
            entries = await budget_events(s, budget)
            if not entries or entries[-1]["event"] != "applied":
                raise CliError(
                    f"no budget {budget!r}", hint="`nexus budgets ls`", code=ExitCode.NOT_FOUND
                )
            await s.publish_guarded(delete_budget(s.bus, budget, deleted_by=whoami()))
        message(output, f"budget/{budget} deleted", {"deleted": budget})

    run(output, body)


async def budget_events(s: Session, budget: str) -> list[dict[str, Any]]:
    """Every apply/delete of `budget`, oldest first, from NEXUS_CATALOG (the audit record);
    an apply carries its revision (the count of applies so far)."""
    entries: list[dict[str, Any]] = []
    revision = 0
    subject = subjects.catalog_events_filter(CatalogKind.BUDGET)
    async for d in s.bus.replay(CATALOG, filter_subject=subject):
        if d.address.ids.get("id") != budget:
            continue
        body = d.event.model_dump(mode="json")
        applied = d.address.event == "applied"
        revision += applied
        entries.append(
            {
                "seq": d.envelope.stream_seq,
                "event": d.address.event,
                "revision": revision if applied else None,
                "time": d.envelope.timestamp.isoformat() if d.envelope.timestamp else None,
                "by": body.get("applied_by") or body.get("deleted_by"),
                "body": body,
            }
        )
    return entries


@app.command("history")
def history_cmd(ctx: typer.Context, budget: BudgetArg, output: OutputOpt = Output.TABLE) -> None:
    """Every revision and delete of the budget, from the NEXUS_CATALOG stream."""
    g = globals_of(ctx)

    async def body() -> None:
        check_token(budget, "budget id")
        async with Session(resolve_target(g), g.timeout) as s:
            entries = await budget_events(s, budget)
        if not entries:
            raise CliError(f"no history for budget {budget!r}", code=ExitCode.NOT_FOUND)
        rows = []
        for e in entries:
            what = _summary(e["body"].get("budget"))
            rows.append((e["seq"], e["event"], e["revision"] or "", e["time"], e["by"], what))
        emit(
            output,
            {"budget": budget, "history": entries},
            ("SEQ", "EVENT", "REV", "TIME", "BY", "BUDGET"),
            rows,
        )

    run(output, body)


def _summary(body: dict[str, Any] | None) -> str:
    """``team:alpha month $50.00 ask``: one revision in a history row."""
    if body is None:
        return ""  # a delete
    try:
        b = BudgetDefinition.model_validate(body)
    except ValidationError:
        return "(not a valid budget)"  # published by hand; the spend service refuses it too
    return f"{b.scope.label()} {b.period} {limits_text(b.limits)} {b.on_exceed}"


@app.command("ls")
def ls_cmd(
    ctx: typer.Context,
    team: Annotated[str | None, typer.Option(help="Only budgets of this team's scope.")] = None,
    output: OutputOpt = Output.TABLE,
) -> None:
    """Budgets with their limits and where they stand in the current period (spent /
    reserved / limit of the scope nearest its limit) from the spend service."""
    g = globals_of(ctx)

    async def body() -> None:
        if team is not None:
            check_token(team, "team")
        async with Session(resolve_target(g), g.timeout) as s:
            data = await s.query(
                subjects.SPEND_BUDGETS_LIST,
                BudgetsList(team=team).model_dump(mode="json"),
                service=SPEND,
            )
        reply = BudgetsReply.model_validate(data)
        emit(
            output,
            reply.model_dump(mode="json"),
            LS_COLUMNS,
            [budget_row(v.budget, v.standings) for v in reply.budgets],
            empty="no budgets; apply some with `nexus budgets apply budgets/`",
        )

    run(output, body)


@app.command("show")
def show_cmd(ctx: typer.Context, budget: BudgetArg, output: OutputOpt = Output.TABLE) -> None:
    """The budget and every scope it has seen in the current period: spent, reserved, left,
    runs, state and the open ask."""
    g = globals_of(ctx)

    async def body() -> None:
        check_token(budget, "budget id")
        async with Session(resolve_target(g), g.timeout) as s:
            try:
                data = await s.query(
                    subjects.SPEND_BUDGETS_GET,
                    BudgetGet(id=budget).model_dump(mode="json"),
                    service=SPEND,
                )
            except CliError as exc:
                if exc.code is ExitCode.NOT_FOUND:
                    exc.message, exc.hint = f"no budget {budget!r}", "`nexus budgets ls`"
                raise
        view = BudgetView.model_validate(data)
        if output is Output.JSON:
            print_json(view.model_dump(mode="json"))
            return
        _print_budget(view)

    run(output, body)


def _print_budget(view: BudgetView) -> None:
    b = view.budget
    console.print(f"[bold]budget {b.id}[/]  revision {view.revision}")
    if b.description:
        console.print(f"  {b.description}", markup=False)
    console.print(
        f"  scope {b.scope.label()}   period {b.period}   limits {limits_text(b.limits)}"
        f"   on exceed {b.on_exceed}",
        markup=False,
    )
    if b.on_exceed is OnExceed.ASK:
        approvers = ", ".join(b.approvers() or ["the deployment's default"])
        console.print(
            f"  ask adds {usd(b.ask.extend_cost_usd)}"
            f" / {b.ask.extend_tokens:,} tokens / {b.ask.extend_runs} runs;"
            f" approvers {approvers}",
            markup=False,
        )
    if not view.standings:
        console.print("[dim]  no run has counted against it this period[/]")
        return
    rows = [
        (
            st.instance,
            st.bucket,
            spent_text(st),
            reserved_text(st),
            left_text(st),
            st.runs if st.limit_runs is None else f"{st.runs} of {st.limit_runs}",
            st.state,
            st.ask_id or "",
        )
        for st in view.standings
    ]
    console.print(table(None, SHOW_COLUMNS, rows))
