"""Runs: `nexus run`, `ps`, `attach`, `logs`, `events`, `cancel`, `approve`, `deny`."""

from __future__ import annotations

import asyncio
import contextlib
import sys
import time
import uuid
from collections.abc import AsyncGenerator
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any

import typer
from nexus_events import subjects
from nexus_events.codec import Decoded
from nexus_events.events import ApprovalDecision, CancelRequested, Origin, RepoSpec, RunRequested
from nexus_events.runstate import is_terminal
from nexus_events.streams import LOGS, RUNS
from pydantic import ValidationError
from rich.live import Live

from nexus_cli.client import Session, check_token, whoami
from nexus_cli.errors import CliError, ExitCode
from nexus_cli.follow import follow
from nexus_cli.options import Output, OutputOpt, globals_of, run
from nexus_cli.output import ago, console, emit, message, print_json
from nexus_cli.runview import RunView, describe
from nexus_cli.target import resolve_target

CommentOpt = Annotated[str | None, typer.Option("--comment", "-m", help="A note for the agent.")]
ApprovalArg = Annotated[str, typer.Argument(metavar="APPROVAL", help="Approval id.")]
RunArg = Annotated[str, typer.Argument(metavar="RUN", help="Run id.")]
FollowOpt = Annotated[
    bool, typer.Option("--follow", "-f", help="Keep following until the run ends.")
]
# Seconds without a new log line, after the run ended, before `logs -f` stops.
LOG_TAIL_QUIET = 1.0
TERMINAL_EVENTS = frozenset({"completed", "failed", "cancelled", "timed_out", "lost"})


def new_run_id() -> str:
    return f"run_{uuid.uuid4().hex[:12]}"


def _event_dict(d: Decoded) -> dict[str, Any]:
    return {
        "seq": d.envelope.stream_seq,
        "event": d.address.event,
        "time": d.envelope.timestamp.isoformat() if d.envelope.timestamp else None,
        "source": d.envelope.source,
        "body": d.event.model_dump(mode="json", exclude_none=True),
    }


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
    events = follow(session.bus, RUNS, subjects.run_events_filter(run_id))

    async def consume(show: Any) -> None:
        async with contextlib.aclosing(events) as stream:
            async for d in stream:
                name = d.address.event or ""
                view.apply(name, d.event.model_dump(mode="json"), d.envelope.timestamp)
                show(name, d)
                if name in TERMINAL_EVENTS:
                    return

    timeout = None if deadline is None else max(deadline - time.monotonic(), 0.1)
    try:
        if use_live:
            with Live(view.render(), console=console, refresh_per_second=4) as screen:

                def refresh(_: str, __: Decoded) -> None:
                    screen.update(view.render(datetime.now(UTC)))

                ticker = asyncio.create_task(_tick(screen, view))
                try:
                    await asyncio.wait_for(consume(refresh), timeout)
                finally:
                    ticker.cancel()
        else:

            def line(name: str, d: Decoded) -> None:
                if output is Output.TABLE:
                    stamp = (
                        d.envelope.timestamp.strftime("%H:%M:%S") if d.envelope.timestamp else ""
                    )
                    console.print(
                        f"{stamp} {describe(name, d.event.model_dump(mode='json'))}", markup=False
                    )

            await asyncio.wait_for(consume(line), timeout)
    except TimeoutError:
        raise CliError(
            f"run {run_id} had not ended when the wait ran out (status {view.status})",
            hint=f"it goes on; `nexus attach {run_id}` or `nexus events {run_id} -f`",
            code=ExitCode.TIMEOUT,
        ) from None
    return view


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


def register(app: typer.Typer) -> None:  # noqa: PLR0915 - one place registers the run commands
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
        follow_run: Annotated[
            bool, typer.Option("--follow", "-f", help="Show the run live; exit with its outcome.")
        ] = False,
        background: Annotated[
            bool, typer.Option("--bg", help="Print the run id and return.")
        ] = False,
        wait: Annotated[
            float | None, typer.Option(help="With --follow: most seconds to wait.")
        ] = None,
        output: OutputOpt = Output.TABLE,
    ) -> None:
        """Request a run of AGENT and print its id; --follow shows it live (the default on a
        terminal) and exits 0 if it completed, 1 if it failed, was cancelled or timed out."""
        g = globals_of(ctx)

        async def body() -> None:
            if follow_run and background:
                raise CliError("--follow and --bg exclude each other", code=ExitCode.INVALID)
            check_token(agent, "agent id")
            if task is not None and subjects.TOKEN_PATTERN.fullmatch(task) is None:
                raise CliError(
                    f"invalid task id {task!r}: must match [A-Za-z0-9_-]{{1,128}}",
                    hint="--task takes a task id (`nexus task create`);"
                    " put instructions in --input",
                    code=ExitCode.INVALID,
                )
            rid = check_token(run_id, "run id") if run_id else new_run_id()
            request = RunRequested(
                agent_id=agent,
                task_id=task,
                input=input_text,
                repo=_repo(repo),
                origin=Origin.CLI,
                requested_by=whoami(),
                labels=_labels(label or []),
            )
            following = follow_run or (not background and sys.stdout.isatty())
            async with Session(resolve_target(g), g.timeout) as s:
                await s.publish_guarded(
                    s.bus.publish(
                        subjects.run_event(rid, "requested"), request, msg_id=f"cli:requested:{rid}"
                    )
                )
                if not following:
                    message(output, rid, {"run_id": rid, "status": "requested"})
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
        output: OutputOpt = Output.TABLE,
    ) -> None:
        """Runs, newest first: the live ones, or all with --all."""
        g = globals_of(ctx)

        async def body() -> None:
            query: dict[str, Any] = {"limit": 500 if not (all_runs or status) else limit}
            for key, value in (("status", status), ("agent_id", agent), ("task_id", task)):
                if value is not None:
                    query[key] = value
            async with Session(resolve_target(g), g.timeout) as s:
                data = await s.query(subjects.CORE_RUNS_LIST, query)
            runs = data.get("runs", [])
            if not (all_runs or status):
                runs = [r for r in runs if not is_terminal(r["status"])]
            runs = runs[:limit]
            emit(
                output,
                {"runs": runs},
                ("RUN", "AGENT", "TASK", "STATUS", "REASON", "TURNS", "COST", "LAST EVENT"),
                [
                    (
                        r["run_id"],
                        r["agent_id"],
                        r["task_id"],
                        r["status"],
                        r["reason"],
                        r["turns"],
                        f"${r['cost_usd']:.4f}",
                        ago(r["last_event_at"]),
                    )
                    for r in runs
                ],
                empty="no runs"
                if (all_runs or status)
                else "no live runs (--all shows ended ones)",
            )

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
                row = await s.get_run(run_id)
                reply = await s.query(subjects.CORE_RUNS_EVENTS, {"run_id": run_id})
            all_events = reply.get("events", [])
            decisions = [
                e for e in all_events if e["event"] in ("approval_requested", "approval_decided")
            ]
            snapshot = {
                "run": row,
                "phase": all_events[-1]["event"] if all_events else None,
                "last_decision": decisions[-1] if decisions else None,
                "recent_events": all_events[-events:] if events else [],
            }
            if output is Output.JSON:
                print_json(snapshot)
                return
            _print_snapshot(row, snapshot)

        run(output, body)

    @app.command("events")
    def events_cmd(
        ctx: typer.Context,
        run_id: RunArg,
        follow_run: FollowOpt = False,
        output: OutputOpt = Output.TABLE,
    ) -> None:
        """The run's events from NEXUS_RUNS; -f keeps following until the run ends."""
        g = globals_of(ctx)

        async def body() -> None:
            check_token(run_id, "run id")
            async with Session(resolve_target(g), g.timeout) as s:
                if not follow_run:
                    found = [d async for d in s.bus.replay(RUNS, run_id=run_id)]
                    if not found:
                        await s.get_run(run_id)  # exit 3 with the usual message if unknown
                    _print_events(output, [_event_dict(d) for d in found])
                    return
                # Following reads the stored events too: only ask whether there are any.
                if not await _has_events(s, run_id):
                    await s.get_run(run_id)
                stream: AsyncGenerator[Decoded, None] = follow(
                    s.bus, RUNS, subjects.run_events_filter(run_id)
                )
                async with contextlib.aclosing(stream) as events:
                    async for d in events:
                        _print_events(output, [_event_dict(d)], stream_mode=True)
                        if d.address.event in TERMINAL_EVENTS:
                            return

        run(output, body)

    @app.command("logs")
    def logs_cmd(
        ctx: typer.Context,
        run_id: RunArg,
        follow_run: FollowOpt = False,
        output: OutputOpt = Output.TABLE,
    ) -> None:
        """The run's log lines from NEXUS_LOGS; -f follows them until the run ends."""
        g = globals_of(ctx)

        async def body() -> None:
            check_token(run_id, "run id")
            async with Session(resolve_target(g), g.timeout) as s:
                row = await s.get_run(run_id)
                if not follow_run or is_terminal(row["status"]):
                    async for d in s.bus.replay(LOGS, filter_subject=subjects.run_log(run_id)):
                        _print_log(output, d)
                    return
                await _follow_logs(s, run_id, output)

        run(output, body)

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
                row = await s.get_run(run_id)
                if is_terminal(row["status"]):
                    message(
                        output,
                        f"run {run_id} already ended: {row['status']}",
                        {"run_id": run_id, "status": row["status"], "cancel_requested": False},
                    )
                    return
                await s.publish_guarded(
                    s.bus.publish(
                        subjects.run_event(run_id, "cancel_requested"),
                        CancelRequested(reason=reason, requested_by=whoami()),
                        msg_id=f"cli:cancel:{run_id}",
                    )
                )
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
            check_token(run_id, "run id")
            async with Session(resolve_target(g), g.timeout) as s:
                row = await s.get_run(run_id)
                asked = decided = None
                async for d in s.bus.replay(RUNS, run_id=run_id):
                    body = d.event.model_dump(mode="json")
                    if body.get("approval_id") == approval:
                        if d.address.event == "approval_requested":
                            asked = body
                        elif d.address.event == "approval_decided":
                            decided = body
                if asked is None:
                    raise CliError(
                        f"run {run_id} has no approval {approval!r}",
                        hint=f"`nexus attach {run_id}` shows pending approvals",
                        code=ExitCode.NOT_FOUND,
                    )
                if decided is not None or is_terminal(row["status"]):
                    what = decided["decision"] if decided else f"run {row['status']}"
                    raise CliError(
                        f"approval {approval} is already settled ({what})", code=ExitCode.INVALID
                    )
                await s.publish_guarded(
                    s.bus.publish(
                        subjects.inbox(run_id),
                        ApprovalDecision(
                            approval_id=approval,
                            decision=decision,
                            decided_by=whoami(),
                            comment=comment,
                        ),
                        msg_id=f"cli:approval:{run_id}:{approval}",
                    )
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


def _finish(view: RunView, output: Output) -> None:
    if output is Output.JSON:
        print_json(view.as_dict())
    else:
        colour = "green" if view.status == "completed" else "red"
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


async def _has_events(s: Session, run_id: str) -> bool:
    info = await s.bus.js.stream_info(RUNS, subjects_filter=subjects.run_events_filter(run_id))
    return bool(info.state.subjects)


def _print_events(
    output: Output, events: list[dict[str, Any]], *, stream_mode: bool = False
) -> None:
    if output is Output.JSON:
        if stream_mode:
            for e in events:
                sys.stdout.write(__import__("json").dumps(e, default=str) + "\n")
                sys.stdout.flush()
        else:
            print_json({"events": events})
        return
    for e in events:
        console.print(
            f"{e['seq']:>6} {e['time'] or '':<32} {describe(e['event'], e['body'])}", markup=False
        )


def _print_log(output: Output, d: Decoded) -> None:
    body = d.event.model_dump(mode="json")
    if output is Output.JSON:
        sys.stdout.write(__import__("json").dumps(body) + "\n")
        sys.stdout.flush()
    else:
        console.print(
            f"[dim]{body.get('stream', ''):>8}[/] {body.get('text', '')}", highlight=False
        )


async def _follow_logs(s: Session, run_id: str, output: Output) -> None:
    """Log lines live until the run ends (then what is still stored, and stop)."""
    ended = asyncio.Event()

    async def watch_end() -> None:
        stream = follow(s.bus, RUNS, subjects.run_events_filter(run_id))
        async with contextlib.aclosing(stream) as events:
            async for d in events:
                if d.address.event in TERMINAL_EVENTS:
                    ended.set()
                    return

    watcher = asyncio.create_task(watch_end())
    logs = follow(s.bus, LOGS, subjects.run_log(run_id))
    try:
        async with contextlib.aclosing(logs) as lines:
            while not ended.is_set():
                nxt = asyncio.ensure_future(anext(lines))
                end = asyncio.ensure_future(ended.wait())
                done, _ = await asyncio.wait({nxt, end}, return_when=asyncio.FIRST_COMPLETED)
                end.cancel()
                if nxt in done:
                    _print_log(output, nxt.result())
                    continue
                # The run ended: print what is still arriving, until it goes quiet.
                try:
                    _print_log(output, await asyncio.wait_for(nxt, LOG_TAIL_QUIET))
                except TimeoutError:
                    break
                while True:
                    try:
                        _print_log(output, await asyncio.wait_for(anext(lines), LOG_TAIL_QUIET))
                    except TimeoutError:
                        break
    finally:
        watcher.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watcher


def _print_snapshot(row: dict[str, Any], snap: dict[str, Any]) -> None:
    console.print(
        f"[bold]run {row['run_id']}[/]  agent {row['agent_id']}  task {row['task_id'] or '-'}"
    )
    status = row["status"] + (f" ({row['reason']})" if row.get("reason") else "")
    console.print(f"  status   {status}", markup=False)
    console.print(f"  phase    {snap['phase'] or '-'}", markup=False)
    if row.get("message"):
        console.print(f"  message  {row['message']}", markup=False)
    console.print(
        f"  turns    {row['turns']}   tokens {row['tokens_in']} in / {row['tokens_out']} out"
        f"   ${row['cost_usd']:.4f}",
        markup=False,
    )
    for phase, at in row.get("phases", {}).items():
        console.print(f"  {phase:<12} {at}", markup=False)
    if snap["last_decision"]:
        d = snap["last_decision"]
        console.print(f"  last decision  {describe(d['event'], d['body'])}", markup=False)
    result = row.get("result") or {}
    if result.get("diff_stat"):
        console.print("  diff stat", markup=False)
        console.print("    " + result["diff_stat"].replace("\n", "\n    "), markup=False)
    if result.get("summary"):
        console.print(f"  result   {result['summary']}", markup=False)
    if snap["recent_events"]:
        console.print("  recent events:")
        for e in snap["recent_events"]:
            console.print(f"    {e['seq']:>6} {describe(e['event'], e['body'])}", markup=False)
