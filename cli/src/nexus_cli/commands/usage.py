"""`nexus usage`: what runs spent, grouped by one key, from the spend service (docs/spend.md)."""

from __future__ import annotations

from typing import Annotated

import typer
from nexus_events.contract import subjects
from nexus_events.events.spend import UsageGroup, UsageQuery, UsageReport
from pydantic import ValidationError

from nexus_cli.client import Session
from nexus_cli.errors import CliError, ExitCode
from nexus_cli.options import Output, OutputOpt, globals_of, run
from nexus_cli.output import console, print_json, table
from nexus_cli.spendview import SPEND, USAGE_COLUMNS, usage_row
from nexus_cli.target import resolve_target

JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON (the same as -o json).")]


def build_usage_query(
    by: str,
    *,
    since: str | None = None,
    until: str | None = None,
    team: str | None = None,
    agent: str | None = None,
    flow: str | None = None,
    task: str | None = None,
    limit: int = 100,
) -> UsageQuery:
    """The validated query; a one-line `CliError` (exit 2) naming the first bad flag."""
    flags = {
        "since": since,
        "until": until,
        "team": team,
        "agent_id": agent,
        "flow": flow,
        "task_id": task,
    }
    try:
        return UsageQuery.model_validate(
            {"by": by, "limit": limit, **{k: v for k, v in flags.items() if v is not None}}
        )
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        field = str(first["loc"][0]) if first["loc"] else "query"
        flag = {"agent_id": "agent", "task_id": "task"}.get(field, field)
        given = first.get("input")
        raise CliError(
            f"invalid --{flag} {given!r}: {first['msg']}", code=ExitCode.INVALID
        ) from None


def register(app: typer.Typer) -> None:
    """Register `usage`."""

    @app.command("usage")
    def usage_cmd(
        ctx: typer.Context,
        by: Annotated[
            str, typer.Option("--by", help=f"The key runs are grouped by: {', '.join(UsageGroup)}.")
        ] = UsageGroup.AGENT.value,
        since: Annotated[
            str | None, typer.Option(help="Runs requested at or after (2026-11-01, UTC).")
        ] = None,
        until: Annotated[str | None, typer.Option(help="Runs requested before (UTC).")] = None,
        team: Annotated[str | None, typer.Option(help="Only this team's runs.")] = None,
        agent: Annotated[str | None, typer.Option(help="Only this agent's runs.")] = None,
        flow: Annotated[str | None, typer.Option(help="Only this flow's runs.")] = None,
        task: Annotated[str | None, typer.Option(help="Only this task's runs.")] = None,
        limit: Annotated[int, typer.Option(min=1, max=1000, help="Most rows.")] = 100,
        as_json: JsonOpt = False,
        output: OutputOpt = Output.TABLE,
    ) -> None:
        """Runs, calls, tokens, cost and wall time grouped by one key, costliest first (by
        day: oldest first), and the total of every run the filters keep."""
        g = globals_of(ctx)
        output = Output.JSON if as_json else output

        async def body() -> None:
            query = build_usage_query(
                by,
                since=since,
                until=until,
                team=team,
                agent=agent,
                flow=flow,
                task=task,
                limit=limit,
            )
            async with Session(resolve_target(g), g.timeout) as s:
                data = await s.query(
                    subjects.SPEND_USAGE, query.model_dump(mode="json"), service=SPEND
                )
            report = UsageReport.model_validate(data)
            key = str(report.by).upper()
            if output is Output.JSON:
                print_json(report.model_dump(mode="json"))
                return
            if not report.rows:
                console.print("[dim]no usage for these filters[/]")
                return
            rows = [usage_row(line) for line in report.rows]
            rows.append(usage_row(report.total, key="TOTAL"))
            console.print(table(None, (key, *USAGE_COLUMNS[1:]), rows))

        run(output, body)
