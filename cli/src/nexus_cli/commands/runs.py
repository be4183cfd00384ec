"""Runs: `nexus run`, `ps`, `attach`; following a run live until it ends."""

from __future__ import annotations

import asyncio
import contextlib
import sys
import time
import uuid
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any

import typer
from nexus_events.contract import subjects
from nexus_events.contract.codec import Decoded
from nexus_events.contract.runstate import TERMINAL_EVENTS, RunStatus, is_terminal
from nexus_events.contract.streams import RUNS
from nexus_events.events import Origin, RepoSpec, RunRequested
from nexus_events.transport.run_requests import request_run
from pydantic import ValidationError
from rich.live import Live

from nexus_cli.client import Session, check_token, whoami
from nexus_cli.errors import CliError, ExitCode
from nexus_cli.follow import follow
from nexus_cli.options import Output, OutputOpt, RunArg, globals_of, run
from nexus_cli.output import ago, console, emit, message, print_json, until
from nexus_cli.resumelines import attempt_label
from nexus_cli.runsnapshot import print_snapshot, run_snapshot
from nexus_cli.runview import RunView, delegation_tree, describe, tree_label
from nexus_cli.spendview import spend_lines, usd
from nexus_cli.target import resolve_target


def new_run_id() -> str:
    return f"run_{uuid.uuid4().hex[:12]}"


Show = Callable[[str, Decoded], Awaitable[None]]


async def track_run(session: Session, view: RunView, show: Show, wait: float | None) -> RunView:
    """Apply the run's events (stored, then live) to `view` and hand each to `show` until the
    run ends; a CliError (exit 5) if it has not ended within `wait` seconds."""
    run_id = view.run_id
    events = follow(session.bus, RUNS, subjects.run_events_filter(run_id))

    async def consume() -> None:
        async with contextlib.aclosing(events) as stream:
            async for d in stream:
                name = d.address.event or ""
                view.apply(name, d.event.model_dump(mode="json"), d.envelope.timestamp)
                await show(name, d)
                if name in TERMINAL_EVENTS:
                    return

    try:
        await asyncio.wait_for(consume(), wait)
    except TimeoutError:
        raise CliError(
            f"run {run_id} had not ended when the wait ran out (status {view.status})",
            hint=f"it goes on; `nexus attach {run_id}` or `nexus events {run_id} -f`",
            code=ExitCode.TIMEOUT,
        ) from None
    return view


def event_line(name: str, d: Decoded) -> str:
    """One run event as the CLI prints it while following: ``HH:MM:SS <what happened>``."""
    stamp = d.envelope.timestamp.strftime("%H:%M:%S") if d.envelope.timestamp else ""
    return f"{stamp} {describe(name, d.event.model_dump(mode='json'))}"


async def watch_run(
    session: Session,
    run_id: str,
    output: Output,
    *,
    deadline: float | None = None,
    live: bool | None = None,
) -> RunView:
    """Follow the run's events (stored, then live) until it ends; show them as they come."""
    view = RunView(run_id)
    use_live = (sys.stdout.isatty() if live is None else live) and output is Output.TABLE
    timeout = None if deadline is None else max(deadline - time.monotonic(), 0.1)
    if use_live:
        with Live(view.render(), console=console, refresh_per_second=4) as screen:

            async def refresh(_: str, __: Decoded) -> None:
                screen.update(view.render(datetime.now(UTC)))

            ticker = asyncio.create_task(_tick(screen, view))
            try:
                return await track_run(session, view, refresh, timeout)
            finally:
                ticker.cancel()

    async def line(name: str, d: Decoded) -> None:
        if output is Output.TABLE:
            console.print(event_line(name, d), markup=False)

    return await track_run(session, view, line, timeout)


async def _tick(screen: Live, view: RunView) -> None:
    while True:  # redraw the elapsed time between events
        await asyncio.sleep(0.5)
        screen.update(view.render(datetime.now(UTC)))


def _repo(value: str | None) -> RepoSpec | None:
    if value is None:
        return None
    path = Path(value).expanduser()
    url = str(path.resolve()) if path.exists() else value
    try:
        return RepoSpec(url=url)
    except ValidationError as exc:
        raise CliError(f"invalid --repo: {exc.errors()[0]['msg']}", code=ExitCode.INVALID) from None


def _labels(values: list[str]) -> dict[str, str]:
    out = {}
    for item in values:
        key, sep, val = item.partition("=")
        if not sep or not key:
            raise CliError(f"invalid --label {item!r}: use KEY=VALUE", code=ExitCode.INVALID)
        out[key] = val
    return out


def build_run_request(
    *,
    agent: str,
    requested_by: str,
    task: str | None = None,
    input_text: str = "",
    repo: str | None = None,
    labels: dict[str, str] | None = None,
    plan_mode: bool | None = None,
    run_id: str | None = None,
    team: str | None = None,
) -> tuple[str, RunRequested]:
    """The run id and its validated request (RunRequested); a one-line CliError (exit 2)."""
    check_token(agent, "agent id")
    if task is not None and subjects.TOKEN_PATTERN.fullmatch(task) is None:
        raise CliError(
            f"invalid task id {task!r}: must match [A-Za-z0-9_-]{{1,128}}",
            hint="--task takes a task id (`nexus task create`); put instructions in --input",
            code=ExitCode.INVALID,
        )
    rid = check_token(run_id, "run id") if run_id else new_run_id()
    if team is not None:
        check_token(team, "team")
    try:
        request = RunRequested(
            team=team,
            agent_id=agent,
            task_id=task,
            input=input_text,
            repo=_repo(repo),
            origin=Origin.CLI,
            requested_by=requested_by,
            labels=labels or {},
            plan_mode=plan_mode,
        )
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        where = ".".join(str(p) for p in first["loc"]) or "request"
        raise CliError(
            f"invalid run request: {where}: {first['msg']}", code=ExitCode.INVALID
        ) from None
    return rid, request


async def publish_run(s: Session, rid: str, request: RunRequested, msg_prefix: str = "cli") -> int:
    """Publish the run request; its sequence in NEXUS_RUNS.

    On failure the error names the run id: the request may still be stored once NATS is
    back, and asking again with ``--run-id`` (the same message id) stores it at most once.
    """
    try:
        ack = await s.publish_guarded(request_run(s.bus, rid, request, source=msg_prefix))
    except CliError as exc:
        exc.message = f"{exc.message} (run {rid}: retry with --run-id {rid} to request it once)"
        raise
    return int(ack.seq)


def _ps_query(
    all_runs: bool,
    limit: int,
    status: str | None,
    agent: str | None,
    task: str | None,
    *,
    golden: bool,
) -> dict[str, Any]:
    """core's runs.list query for `nexus ps`: all its 500 newest when only live ones are
    shown (filtered here), else `limit`."""
    query: dict[str, Any] = {"limit": 500 if not (all_runs or status) else limit}
    for key, value in (("status", status), ("agent_id", agent), ("task_id", task)):
        if value is not None:
            query[key] = value
    if golden:
        query["golden"] = True
    return query


def ps_row(r: dict[str, Any], depth: int) -> tuple[Any, ...]:
    """One row of `nexus ps`. A run a budget holds is ``queued (budget)`` or
    ``awaiting_approval (budget)``; why is said under the table (`budget_waits`), whole,
    where a cell would fold it to a word per line; a sleeping run is ``sleeping until 14:05
    (in 3m00s)``."""
    return (
        tree_label(r["run_id"], depth),  # a delegated run sits under the run that delegated it
        r["agent_id"],
        r["task_id"],
        status_label(r),
        r["reason"],
        attempt_label(r.get("attempt"), r.get("max_attempts")),
        r["turns"],
        r.get("condensations", 0),
        usd(r["cost_usd"]),
        ago(r["last_event_at"]),
    )


def status_label(r: dict[str, Any]) -> str:
    """The STATUS cell: ``queued (budget)`` for a run a budget holds, ``sleeping until 14:05
    (in 3m00s)`` for a sleeping run, else the status."""
    if r.get("budget_wait"):
        return f"{r['status']} (budget)"
    if r["status"] == RunStatus.SLEEPING and r.get("sleeping_until"):
        return f"sleeping until {until(r['sleeping_until'])}"
    return str(r["status"])


def budget_waits(runs: list[dict[str, Any]]) -> list[str]:
    """``run_1 waits: <why>`` for each run a budget holds, the lines under `nexus ps`."""
    return [f"{r['run_id']} waits: {r['budget_wait']}" for r in runs if r.get("budget_wait")]


def register(app: typer.Typer) -> None:
    """Register `run`, `ps` and `attach`."""

    @app.command("run")
    def run_cmd(
        ctx: typer.Context,
        agent: Annotated[str, typer.Argument(metavar="AGENT", help="Agent id.")],
        task: Annotated[
            str | None, typer.Option("--task", "-t", help="Task id the run works on.")
        ] = None,
        input_text: Annotated[
            str, typer.Option("--input", "-i", help="Instructions for the agent.")
        ] = "",
        repo: Annotated[
            str | None, typer.Option(help="Repository: a local path or a git URL.")
        ] = None,
        label: Annotated[
            list[str] | None, typer.Option(help="KEY=VALUE label (repeatable).")
        ] = None,
        run_id: Annotated[str | None, typer.Option("--run-id", help="Choose the run id.")] = None,
        team: Annotated[
            str | None,
            typer.Option(help="The team it counts against (default: its task's, agent's)."),
        ] = None,
        follow_run: Annotated[
            bool, typer.Option("--follow", "-f", help="Show the run live; exit with its outcome.")
        ] = False,
        background: Annotated[
            bool, typer.Option("--bg", help="Print the run id and return.")
        ] = False,
        wait: Annotated[
            float | None, typer.Option(help="With --follow: most seconds to wait.")
        ] = None,
        plan_mode: Annotated[
            bool | None,
            typer.Option(
                "--plan-mode/--no-plan-mode",
                help="Start in plan mode (read tools until a plan is approved) or not;"
                " default: as the agent definition says.",
            ),
        ] = None,
        output: OutputOpt = Output.TABLE,
    ) -> None:
        """Request a run of AGENT and print its id; --follow shows it live (the default on a
        terminal) and exits 0 if it completed, 1 if it failed, was cancelled or timed out."""
        g = globals_of(ctx)

        async def body() -> None:
            if follow_run and background:
                raise CliError("--follow and --bg exclude each other", code=ExitCode.INVALID)
            rid, request = build_run_request(
                agent=agent,
                requested_by=whoami(),
                task=task,
                input_text=input_text,
                repo=repo,
                labels=_labels(label or []),
                plan_mode=plan_mode,
                run_id=run_id,
                team=team,
            )
            following = follow_run or (not background and sys.stdout.isatty())
            async with Session(resolve_target(g), g.timeout) as s:
                await publish_run(s, rid, request)
                if not following:
                    message(output, rid, {"run_id": rid, "status": RunStatus.REQUESTED.value})
                    return
                if output is Output.TABLE:
                    console.print(f"run {rid} requested", markup=False)
                deadline = None if wait is None else time.monotonic() + wait
                view = await watch_run(s, rid, output, deadline=deadline)
            _finish(view, output)

        run(output, body)

    @app.command("ps")
    def ps_cmd(
        ctx: typer.Context,
        all_runs: Annotated[bool, typer.Option("--all", "-a", help="Include ended runs.")] = False,
        status: Annotated[str | None, typer.Option(help="Only runs in this status.")] = None,
        agent: Annotated[str | None, typer.Option(help="Only runs of this agent.")] = None,
        task: Annotated[str | None, typer.Option(help="Only runs of this task.")] = None,
        limit: Annotated[int, typer.Option(min=1, max=500, help="Most runs to list.")] = 50,
        golden: Annotated[
            bool, typer.Option("--golden", help="Only golden runs (eval cases; implies --all).")
        ] = False,
        output: OutputOpt = Output.TABLE,
    ) -> None:
        """Runs, newest first: the live ones, or all with --all."""
        g = globals_of(ctx)
        all_runs = all_runs or golden  # a golden run has ended

        async def body() -> None:
            query = _ps_query(all_runs, limit, status, agent, task, golden=golden)
            async with Session(resolve_target(g), g.timeout) as s:
                data = await s.query(subjects.CORE_RUNS_LIST, query)
            runs = data.get("runs", [])
            if not (all_runs or status):
                runs = [r for r in runs if not is_terminal(r["status"])]
            runs = runs[:limit]
            emit(
                output,
                {"runs": runs},
                (
                    "RUN",
                    "AGENT",
                    "TASK",
                    "STATUS",
                    "REASON",
                    "ATTEMPT",
                    "TURNS",
                    "CONDENSED",
                    "COST",
                    "LAST EVENT",
                ),
                [ps_row(r, depth) for r, depth in delegation_tree(runs)],
                empty="no runs"
                if (all_runs or status)
                else "no live runs (--all shows ended ones)",
            )
            if output is Output.TABLE:
                for line in budget_waits(runs):
                    console.print(line, markup=False)

        run(output, body)

    @app.command("attach")
    def attach_cmd(
        ctx: typer.Context,
        run_id: RunArg,
        events: Annotated[int, typer.Option(min=0, help="How many recent events to show.")] = 10,
        output: OutputOpt = Output.TABLE,
    ) -> None:
        """A snapshot of the run: status, phase, timings, last decision, recent events, result."""
        g = globals_of(ctx)

        async def body() -> None:
            check_token(run_id, "run id")
            async with Session(resolve_target(g), g.timeout) as s:
                row, snapshot, spend = await run_snapshot(s, run_id, events)
            if output is Output.JSON:
                print_json(snapshot)
                return
            print_snapshot(row, snapshot)
            for line in [] if spend is None else spend_lines(spend):
                console.print(line, markup=False)

        run(output, body)


def _finish(view: RunView, output: Output) -> None:
    if output is Output.JSON:
        print_json(view.as_dict())
    else:
        colour = "green" if view.status == RunStatus.COMPLETED else "red"
        console.print(
            f"[{colour}]run {view.run_id} {view.status}[/]"
            + (
                f" ({view.reason}: {view.message})"
                if view.message
                else f" ({view.reason})"
                if view.reason
                else ""
            )
        )
        summary = (view.result or {}).get("summary")
        if summary:
            console.print(summary, markup=False)
    code = view.exit_code()
    if code is not ExitCode.OK:
        raise typer.Exit(int(code))
