"""`nexus board` (columns with tasks and their run state) and `nexus task create|ls`."""

from __future__ import annotations

import uuid
from typing import Annotated, Any

import typer
from nexus_events.contract import subjects
from nexus_events.events import Column, TaskCreated
from pydantic import ValidationError
from rich.columns import Columns
from rich.markup import escape
from rich.panel import Panel

from nexus_cli.boardflows import flows_by_task
from nexus_cli.client import Session, check_token, whoami
from nexus_cli.errors import CliError, ExitCode
from nexus_cli.flowview import board_label
from nexus_cli.options import Output, OutputOpt, globals_of, run
from nexus_cli.output import console, emit, message, print_json
from nexus_cli.target import resolve_target

task_app = typer.Typer(help="Tasks on the board: create, list.")


def _run_label(run: dict[str, Any] | None) -> str:
    if not run:
        return ""
    attempt = run.get("attempt")
    # Only a resumed run says which attempt it is on (docs/resume.md).
    again = f" (attempt {attempt})" if isinstance(attempt, int) and attempt > 1 else ""
    return f"{run['run_id']} {run.get('status') or '?'}{again}"


def child_lines(task: dict[str, Any]) -> list[str]:
    """The task's delegated runs as lines under it, each below the run that delegated it and
    indented by depth: ``  ↳ reviewer  run_abc  running``."""
    children = task.get("child_runs") or []
    known = {c["run_id"] for c in children}
    below: dict[str | None, list[dict[str, Any]]] = {}
    for c in children:  # oldest first, so siblings keep their order
        parent = c["parent_run_id"] if c["parent_run_id"] in known else None
        below.setdefault(parent, []).append(c)
    lines: list[str] = []

    def walk(parent: str | None, depth: int) -> None:
        for c in below.pop(parent, []):
            agent, status = c.get("agent_id") or "?", c.get("status") or "?"
            lines.append(f"{'  ' * depth}↳ {agent}  {c['run_id']}  {status}")
            walk(c["run_id"], depth + 1)

    walk(None, 1)
    for parent in list(below):  # parents that never resolve (a hand-made loop): still shown
        walk(parent, 1)
    return lines


async def _board(
    ctx: typer.Context, column: str | None, *, with_flows: bool = False
) -> dict[str, Any]:
    """Core's board; `with_flows` adds each task's newest flow run (`flow`, None if it has
    none) and `flows_note` when the flows service could not say."""
    g = globals_of(ctx)
    query: dict[str, Any] = {} if column is None else {"column": column}
    async with Session(resolve_target(g), g.timeout) as s:
        data = await s.query(subjects.CORE_BOARD_GET, query)
        if with_flows:
            tasks = data.get("tasks", [])
            flows, note = await flows_by_task(s, [t["task_id"] for t in tasks])
            for t in tasks:
                t["flow"] = flows.get(t["task_id"])
            data["flows_note"] = note
        return data


def _check_column(column: str | None) -> None:
    if column is not None and column not in {c.value for c in Column}:
        raise CliError(
            f"unknown column {column!r}",
            hint="one of: " + ", ".join(c.value for c in Column),
            code=ExitCode.INVALID,
        )


def register(app: typer.Typer) -> None:
    @app.command("board")
    def board_cmd(
        ctx: typer.Context,
        column: Annotated[str | None, typer.Option(help="Only this column.")] = None,
        output: OutputOpt = Output.TABLE,
    ) -> None:
        """The board: one column per state, each task with its current run and its flow run
        (flow and current step; a note instead when the flows service is not running)."""

        async def body() -> None:
            _check_column(column)
            data = await _board(ctx, column, with_flows=True)
            if output is Output.JSON:
                print_json(data)
                return
            tasks = data.get("tasks", [])
            if not tasks:
                console.print("[dim]the board is empty; `nexus task create TITLE`[/]")
                return
            # Delegated runs need the room of their agent and indent beside id and status.
            width = 44 if any(t.get("child_runs") for t in tasks) else 34
            panels = []
            for col in Column:
                items = [t for t in tasks if t["column"] == col.value]
                if (
                    not items
                    and column is None
                    and col in (Column.AWAITING_APPROVAL, Column.FAILED)
                ):
                    continue
                lines = [
                    f"[bold]{t['task_id']}[/] {t['title']}"
                    + (f"\n  [dim]{_run_label(t['current_run'])}[/]" if t["current_run"] else "")
                    + (f"\n  [cyan]{escape(board_label(t['flow']))}[/]" if t.get("flow") else "")
                    + "".join(f"\n[dim]{escape(line)}[/]" for line in child_lines(t))
                    for t in items
                ]
                panels.append(
                    Panel(
                        "\n".join(lines) or "[dim]-[/]",
                        title=f"{col.value} ({len(items)})",
                        title_align="left",
                        width=width,
                    )
                )
            console.print(Columns(panels))
            if data.get("flows_note"):
                console.print(f"[dim]{escape(data['flows_note'])}[/]")

        run(output, body)


@task_app.command("create")
def create_cmd(
    ctx: typer.Context,
    title: Annotated[str, typer.Argument(help="Task title.")],
    task_id: Annotated[
        str | None, typer.Option("--id", help="Task id (default: generated).")
    ] = None,
    description: Annotated[str, typer.Option("--description", "-d", help="Markdown.")] = "",
    column: Annotated[str, typer.Option(help="Initial column.")] = Column.BACKLOG.value,
    label: Annotated[list[str] | None, typer.Option(help="A label (repeatable).")] = None,
    team: Annotated[
        str | None, typer.Option(help="The team its runs count against (docs/spend.md).")
    ] = None,
    output: OutputOpt = Output.TABLE,
) -> None:
    """Create a task on the board (a `created` event on NEXUS_TASKS); print its id."""
    g = globals_of(ctx)

    async def body() -> None:
        _check_column(column)
        tid = check_token(task_id, "task id") if task_id else f"T-{uuid.uuid4().hex[:8]}"
        if team is not None:
            check_token(team, "team")
        try:
            event = TaskCreated(
                team=team,
                title=title,
                description=description,
                column=Column(column),
                labels=label or [],
                created_by=whoami(),
            )
        except ValidationError as exc:
            raise CliError(
                "invalid task",
                code=ExitCode.INVALID,
                details=[f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors()],
            ) from None
        async with Session(resolve_target(g), g.timeout) as s:
            await s.publish_guarded(
                s.bus.publish(subjects.task_event(tid, "created"), event, msg_id=f"cli:task:{tid}")
            )
        message(output, tid, {"task_id": tid, "title": title, "column": column})

    run(output, body)


@task_app.command("ls")
def ls_cmd(
    ctx: typer.Context,
    column: Annotated[str | None, typer.Option(help="Only this column.")] = None,
    output: OutputOpt = Output.TABLE,
) -> None:
    """Tasks with their column and current run."""

    async def body() -> None:
        _check_column(column)
        data = await _board(ctx, column)
        emit(
            output,
            data,
            ("TASK", "TITLE", "COLUMN", "RUN", "RUNS"),
            [
                (
                    t["task_id"],
                    t["title"],
                    t["column"],
                    _run_label(t["current_run"]),
                    1 + len(t["past_runs"]) if t["current_run"] else len(t["past_runs"]),
                )
                for t in data.get("tasks", [])
            ],
            empty="no tasks",
        )

    run(output, body)
