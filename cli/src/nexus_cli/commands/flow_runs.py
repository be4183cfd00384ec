"""Flow runs: `nexus flow run|ls|show|cancel|resume|signal` (definitions are `nexus flows`)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
import uuid
from typing import Annotated, Any

import typer
from nexus_events.contract import subjects
from nexus_events.contract.streams import FLOWS
from nexus_events.events import (
    FlowCancelRequested,
    FlowRequested,
    FlowResumeRequested,
    FlowSignal,
    FlowStatus,
    Origin,
)
from nexus_events.events.base import Event
from nexus_events.events.flows import FlowEvent, FlowsList
from nexus_events.transport.run_requests import request_flow
from pydantic import ValidationError
from rich.console import Console

from nexus_cli.client import Session, check_token, whoami
from nexus_cli.commands.runs import _labels, _repo
from nexus_cli.errors import CliError, ExitCode
from nexus_cli.flowview import FLOW_ENDS, describe_flow_event, print_flow_run
from nexus_cli.follow import follow
from nexus_cli.options import Output, OutputOpt, globals_of, run
from nexus_cli.output import ago, console, emit, message, print_json
from nexus_cli.target import resolve_target

app = typer.Typer(
    help="Flow runs: start one (and follow it), list, show, cancel, resume, signal."
    " Flow definitions: `nexus flows`.",
    no_args_is_help=True,
)

FlowRunArg = Annotated[str, typer.Argument(metavar="FLOW_RUN", help="Flow run id.")]
FLOWS_SERVICE = "the flows service"


def new_flow_run_id() -> str:
    # '_' not '-': the id stays one visible token inside its steps' run ids
    # (`<flow_run_id>-<step>-r<round>`).
    return f"flow_{uuid.uuid4().hex[:12]}"


async def get_flow_run(s: Session, flow_run_id: str) -> dict[str, Any]:
    """The flow run as the flows service projects it (404: the service's own message)."""
    check_token(flow_run_id, "flow run id")
    return await s.query(subjects.FLOWS_GET, {"flow_run_id": flow_run_id}, service=FLOWS_SERVICE)


async def watch_flow(
    s: Session, flow_run_id: str, output: Output, *, deadline: float | None
) -> tuple[str, dict[str, Any]]:
    """Print the flow run's events (stored, then live) until it ends; its last event."""
    events = follow(s.bus, FLOWS, subjects.flow_events_filter(flow_run_id))

    async def consume() -> tuple[str, dict[str, Any]]:
        async with contextlib.aclosing(events) as stream:
            async for d in stream:
                name = d.address.event or ""
                body = d.event.model_dump(mode="json")
                if output is Output.TABLE:
                    stamp = (
                        d.envelope.timestamp.strftime("%H:%M:%S") if d.envelope.timestamp else ""
                    )
                    line = describe_flow_event(flow_run_id, name, body)
                    console.print(f"{stamp} {line}", markup=False)
                if name in FLOW_ENDS:
                    return name, body
        raise CliError(
            f"the event stream of flow run {flow_run_id} ended", code=ExitCode.UNAVAILABLE
        )

    timeout = None if deadline is None else max(deadline - time.monotonic(), 0.1)
    try:
        return await asyncio.wait_for(consume(), timeout)
    except TimeoutError:
        raise CliError(
            f"flow run {flow_run_id} had not ended when the wait ran out",
            hint=f"it goes on; `nexus flow show {flow_run_id}`",
            code=ExitCode.TIMEOUT,
        ) from None


def _finish(flow_run_id: str, name: str, body: dict[str, Any], output: Output) -> None:
    if output is Output.JSON:
        print_json(
            {
                "flow_run_id": flow_run_id,
                "status": name,
                "reason": body.get("reason"),
                "message": body.get("message", ""),
            }
        )
    else:
        colour = "green" if name == FlowEvent.COMPLETED else "red"
        console.print(f"[{colour}]flow run {flow_run_id} {name}[/]", highlight=False)
    code = FLOW_ENDS[name]
    if code is not ExitCode.OK:
        raise typer.Exit(int(code))


async def _publish(s: Session, flow_run_id: str, event: Event, msg_id: str | None = None) -> None:
    subject = subjects.flow_event(flow_run_id, type(event))
    # A command's own msg id: the derived one (subject + body) would drop a second resume
    # (or the same signal for a later wait) as a duplicate of the first.
    msg_id = msg_id or f"cli:flow:{event.event_name}:{uuid.uuid4().hex}"
    await s.publish_guarded(s.bus.publish(subject, event, msg_id=msg_id))


async def _existing(s: Session, flow_run_id: str) -> dict[str, Any] | None:
    """The flow run, or None when the flows service is not answering: a command on a flow
    run still goes to the stream then, and the service acts on it when it is back."""
    try:
        return await get_flow_run(s, flow_run_id)
    except CliError as exc:
        if exc.code is not ExitCode.UNAVAILABLE:
            raise
        # stderr: stdout stays the command's result (one JSON document with -o json).
        Console(stderr=True, highlight=False).print(
            f"[dim]note: {FLOWS_SERVICE} is not answering; it acts on this when it is back[/]"
        )
        return None


def build_flow_request(
    *,
    flow: str,
    requested_by: str,
    task: str | None = None,
    input_text: str = "",
    repo: str | None = None,
    revision: int | None = None,
    labels: dict[str, str] | None = None,
    flow_run_id: str | None = None,
    team: str | None = None,
) -> tuple[str, FlowRequested]:
    """The flow run id and its validated request (FlowRequested); a one-line CliError."""
    check_token(flow, "flow id")
    if task is not None:
        check_token(task, "task id")
    fid = check_token(flow_run_id, "flow run id") if flow_run_id else new_flow_run_id()
    if team is not None:
        check_token(team, "team")
    try:
        request = FlowRequested(
            team=team,
            flow=flow,
            revision=revision,
            task_id=task,
            input=input_text,
            repo=_repo(repo),
            origin=Origin.CLI,
            requested_by=requested_by,
            labels=labels or {},
        )
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        where = ".".join(str(p) for p in first["loc"]) or "request"
        raise CliError(
            f"invalid flow request: {where}: {first['msg']}", code=ExitCode.INVALID
        ) from None
    return fid, request


async def publish_flow(
    s: Session, fid: str, request: FlowRequested, msg_prefix: str = "cli"
) -> None:
    await s.publish_guarded(request_flow(s.bus, fid, request, source=msg_prefix))


@app.command("run")
def run_cmd(
    ctx: typer.Context,
    flow: Annotated[str, typer.Argument(metavar="FLOW", help="Flow definition id.")],
    task: Annotated[
        str | None, typer.Option("--task", "-t", help="Task the flow works on.")
    ] = None,
    input_text: Annotated[str, typer.Option("--input", "-i", help="The flow's input.")] = "",
    repo: Annotated[str | None, typer.Option(help="Repository: a local path or a git URL.")] = None,
    revision: Annotated[
        int | None, typer.Option(min=1, help="Definition revision (default: the latest).")
    ] = None,
    label: Annotated[list[str] | None, typer.Option(help="KEY=VALUE label (repeatable).")] = None,
    flow_run_id: Annotated[
        str | None, typer.Option("--flow-run-id", help="Choose the flow run id.")
    ] = None,
    team: Annotated[
        str | None,
        typer.Option(help="The team its runs count against (default: the task's, the flow's)."),
    ] = None,
    follow_flow: Annotated[
        bool, typer.Option("--follow", "-f", help="Show its events; exit with its outcome.")
    ] = False,
    wait: Annotated[float | None, typer.Option(help="With --follow: most seconds to wait.")] = None,
    output: OutputOpt = Output.TABLE,
) -> None:
    """Start FLOW and print the flow run id; --follow prints one line per event and exits 0
    if it completed, 1 if it failed or was cancelled, 5 if --wait ran out."""
    g = globals_of(ctx)

    async def body() -> None:
        fid, request = build_flow_request(
            flow=flow,
            requested_by=whoami(),
            task=task,
            input_text=input_text,
            repo=repo,
            revision=revision,
            labels=_labels(label or []),
            flow_run_id=flow_run_id,
            team=team,
        )
        async with Session(resolve_target(g), g.timeout) as s:
            await publish_flow(s, fid, request)
            if not follow_flow:
                message(output, fid, {"flow_run_id": fid, "status": FlowStatus.REQUESTED.value})
                return
            if output is Output.TABLE:
                console.print(f"flow run {fid} requested", markup=False)
            deadline = None if wait is None else time.monotonic() + wait
            name, end = await watch_flow(s, fid, output, deadline=deadline)
        _finish(fid, name, end, output)

    run(output, body)


@app.command("ls")
def ls_cmd(
    ctx: typer.Context,
    status: Annotated[str | None, typer.Option(help="Only flow runs in this status.")] = None,
    flow: Annotated[str | None, typer.Option(help="Only runs of this flow.")] = None,
    task: Annotated[str | None, typer.Option(help="Only runs for this task.")] = None,
    limit: Annotated[int, typer.Option(min=1, max=500, help="Most flow runs to list.")] = 50,
    output: OutputOpt = Output.TABLE,
) -> None:
    """Flow runs, newest first, as the flows service projects them."""
    g = globals_of(ctx)

    async def body() -> None:
        if status is not None and status not in {s.value for s in FlowStatus}:
            raise CliError(
                f"unknown status {status!r}",
                hint="one of: " + ", ".join(s.value for s in FlowStatus),
                code=ExitCode.INVALID,
            )
        try:
            query = FlowsList.model_validate(
                {"status": status, "flow": flow, "task_id": task, "limit": limit}
            )
        except ValidationError as exc:
            raise CliError(f"invalid filter: {exc.errors()[0]['msg']}") from None
        async with Session(resolve_target(g), g.timeout) as s:
            data = await s.query(
                subjects.FLOWS_LIST, query.model_dump(mode="json"), service=FLOWS_SERVICE
            )
        flows = data.get("flows", [])
        emit(
            output,
            data,
            ("FLOW RUN", "FLOW", "TASK", "STATUS", "STEP", "REASON", "UPDATED"),
            [
                (
                    f["flow_run_id"],
                    f["flow"],
                    f.get("task_id"),
                    f["status"],
                    f.get("current_step"),
                    f.get("reason"),
                    ago(f.get("updated_at")),
                )
                for f in flows
            ],
            empty="no flow runs",
        )

    run(output, body)


@app.command("show")
def show_cmd(ctx: typer.Context, flow_run_id: FlowRunArg, output: OutputOpt = Output.TABLE) -> None:
    """One flow run: status, current step, and every step (round, item) with its run."""
    g = globals_of(ctx)

    async def body() -> None:
        async with Session(resolve_target(g), g.timeout) as s:
            view = await get_flow_run(s, flow_run_id)
        if output is Output.JSON:
            print_json(view)
        else:
            print_flow_run(console, view)

    run(output, body)


@app.command("cancel")
def cancel_cmd(
    ctx: typer.Context,
    flow_run_id: FlowRunArg,
    reason: Annotated[str, typer.Option(help="Why (a reason code).")] = "user_requested",
    output: OutputOpt = Output.TABLE,
) -> None:
    """Cancel a flow run: its live step runs are cancelled, then the flow."""
    g = globals_of(ctx)

    async def body() -> None:
        async with Session(resolve_target(g), g.timeout) as s:
            view = await _existing(s, flow_run_id)
            if view is not None and view["status"] in FLOW_ENDS:
                raise CliError(f"flow run {flow_run_id} already {view['status']}")
            await _publish(
                s, flow_run_id, FlowCancelRequested(reason=reason, requested_by=whoami())
            )
        message(
            output,
            f"cancel of flow run {flow_run_id} requested",
            {"flow_run_id": flow_run_id, "requested": "cancel"},
        )

    run(output, body)


@app.command("resume")
def resume_cmd(
    ctx: typer.Context, flow_run_id: FlowRunArg, output: OutputOpt = Output.TABLE
) -> None:
    """Run a failed flow run's failed step again, in a new round."""
    g = globals_of(ctx)

    async def body() -> None:
        async with Session(resolve_target(g), g.timeout) as s:
            view = await _existing(s, flow_run_id)
            if view is not None and view["status"] != FlowStatus.FAILED:
                raise CliError(
                    f"flow run {flow_run_id} is {view['status']}: only a failed one resumes"
                )
            await _publish(s, flow_run_id, FlowResumeRequested(requested_by=whoami()))
        message(
            output,
            f"resume of flow run {flow_run_id} requested",
            {"flow_run_id": flow_run_id, "requested": "resume"},
        )

    run(output, body)


@app.command("signal")
def signal_cmd(
    ctx: typer.Context,
    flow_run_id: FlowRunArg,
    correlation: Annotated[
        str, typer.Argument(metavar="CORRELATION", help="The wait's correlation id.")
    ],
    payload: Annotated[
        str | None, typer.Option(help="JSON the wait's output `payload` will be.")
    ] = None,
    output: OutputOpt = Output.TABLE,
) -> None:
    """Send the external event an event wait of the flow run waits for."""
    g = globals_of(ctx)

    async def body() -> None:
        try:
            data = None if payload is None else json.loads(payload)
        except ValueError as exc:
            raise CliError(f"--payload is not JSON: {exc}") from None
        try:
            signal = FlowSignal(correlation_id=correlation, payload=data, sent_by=whoami())
        except ValidationError as exc:
            raise CliError(f"invalid signal: {exc.errors()[0]['msg']}") from None
        async with Session(resolve_target(g), g.timeout) as s:
            await _existing(s, flow_run_id)
            await _publish(s, flow_run_id, signal)
        message(
            output,
            f"signal {correlation} sent to flow run {flow_run_id}",
            {"flow_run_id": flow_run_id, "correlation_id": correlation},
        )

    run(output, body)
