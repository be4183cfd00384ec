"""`nexus schedule add|ls|show|pause|resume|rm`: schedules are events on NEXUS_SCHEDULES.

There is no schedule query: the scheduler folds the stream, and so does this command, with a
replay bounded by the stream's end as of the call (docs/schedules.md).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any, Literal

import typer
from nexus_events.events import ScheduleDefined, ScheduleRemoved
from pydantic import ValidationError

from nexus_cli.client import Session, check_token, whoami
from nexus_cli.errors import CliError, ExitCode
from nexus_cli.options import Output, OutputOpt, globals_of, run
from nexus_cli.output import ago, console, emit, message, print_json
from nexus_cli.schedule_store import (
    ScheduleRecord,
    define,
    read_schedule,
    read_schedules,
    set_enabled,
    status_of,
)
from nexus_cli.schedule_triggers import parse_at, validate_cron, zone
from nexus_cli.target import resolve_target

app = typer.Typer(
    help="Schedules: start an agent run or a flow on a cron, an interval or once.",
    no_args_is_help=True,
)

ScheduleArg = Annotated[str, typer.Argument(metavar="SCHEDULE", help="Schedule id.")]
# How many fires and misses `show` lists.
RECENT = 10


def _trigger(d: dict[str, Any]) -> str:
    if d.get("cron"):
        return f"cron {d['cron']} ({d.get('timezone') or 'UTC'})"
    if d.get("interval_seconds"):
        return f"every {d['interval_seconds']}s"
    return f"at {d.get('at')}"


def _target(d: dict[str, Any]) -> str:
    return f"flow {d['flow']}" if d.get("flow") else f"agent {d.get('agent_id')}"


async def _one(s: Session, schedule_id: str) -> ScheduleRecord:
    rec = await read_schedule(s.bus, check_token(schedule_id, "schedule id"))
    if rec is None:
        raise CliError(
            f"no schedule {schedule_id!r}",
            hint="`nexus schedule ls` lists schedules",
            code=ExitCode.NOT_FOUND,
        )
    return rec


@app.command("add")
def add_cmd(
    ctx: typer.Context,
    schedule_id: ScheduleArg,
    agent: Annotated[str | None, typer.Option(help="Agent to run at each fire.")] = None,
    flow: Annotated[str | None, typer.Option(help="Flow to start at each fire.")] = None,
    cron: Annotated[str | None, typer.Option(help="Cron expression, 5 fields.")] = None,
    timezone: Annotated[
        str, typer.Option(help="Time zone of --cron (and of a --at without offset).")
    ] = "UTC",
    every: Annotated[int | None, typer.Option(min=1, help="Fire every SECONDS.")] = None,
    at: Annotated[str | None, typer.Option(help="Fire once at this ISO 8601 time.")] = None,
    task: Annotated[
        str | None, typer.Option("--task", "-t", help="Task each fire works on.")
    ] = None,
    input_text: Annotated[str, typer.Option("--input", "-i", help="Input of each fire.")] = "",
    missed: Annotated[
        str | None, typer.Option(help="Fires missed while down: skip | catch_up_one.")
    ] = None,
    overlap: Annotated[
        str | None,
        typer.Option(help="A fire while the previous is active: skip | queue | cancel_previous."),
    ] = None,
    replace: Annotated[bool, typer.Option(help="Redefine an existing schedule.")] = False,
    paused: Annotated[bool, typer.Option(help="Define it paused.")] = False,
    output: OutputOpt = Output.TABLE,
) -> None:
    """Define a schedule: (--agent | --flow) and (--cron | --every | --at)."""
    g = globals_of(ctx)

    async def body() -> None:
        check_token(schedule_id, "schedule id")
        if (agent is None) == (flow is None):
            raise CliError("give exactly one of --agent, --flow")
        if sum(x is not None for x in (cron, every, at)) != 1:
            raise CliError("give exactly one of --cron, --every, --at")
        for value, what in ((agent, "agent id"), (flow, "flow id"), (task, "task id")):
            if value is not None:
                check_token(value, what)
        zone(timezone)  # stored with every trigger, so a typo is refused with any of them
        if cron is not None:
            validate_cron(cron)
        when = parse_at(at, timezone) if at is not None else None
        if when is not None and when <= datetime.now(UTC):
            # The scheduler would only record it missed: say so now.
            raise CliError(f"--at {at} is in the past")
        missed_policy = _choice(missed, "--missed", ("skip", "catch_up_one"))
        overlap_policy = _choice(overlap, "--overlap", ("skip", "queue", "cancel_previous"))
        try:
            defn = ScheduleDefined(
                agent_id=agent,
                flow=flow,
                task_id=task,
                input=input_text,
                cron=cron,
                interval_seconds=every,
                at=when,
                timezone=timezone,
                enabled=not paused,
                missed_policy=missed_policy,
                overlap_policy=overlap_policy,
            )
        except ValidationError as exc:
            raise CliError(f"invalid schedule: {exc.errors()[0]['msg']}") from None
        async with Session(resolve_target(g), g.timeout) as s:
            if not replace and await read_schedule(s.bus, schedule_id) is not None:
                raise CliError(
                    f"schedule {schedule_id!r} exists",
                    hint="--replace redefines it (its fire history stays)",
                )
            await define(s, schedule_id, defn)
        message(
            output,
            f"schedule {schedule_id} defined: {_target(defn.model_dump())}, "
            f"{_trigger(defn.model_dump(mode='json'))}",
            {"schedule_id": schedule_id, "definition": defn.model_dump(mode="json")},
        )

    run(output, body)


def _choice(value: str | None, flag: str, allowed: tuple[str, ...]) -> str | None:
    if value is not None and value not in allowed:
        raise CliError(f"invalid {flag} {value!r}: one of {', '.join(allowed)}")
    return value


@app.command("ls")
def ls_cmd(ctx: typer.Context, output: OutputOpt = Output.TABLE) -> None:
    """Schedules defined and not removed, with their last fire."""
    g = globals_of(ctx)

    async def body() -> None:
        async with Session(resolve_target(g), g.timeout) as s:
            records = await read_schedules(s.bus)
        emit(
            output,
            {"schedules": [r.as_dict(counts=False) for r in records]},
            (
                "SCHEDULE",
                "TARGET",
                "TRIGGER",
                "TASK",
                "STATUS",
                "LAST FIRE",
                "LAST MISS",
                "CREATED BY",
            ),
            [
                (
                    r.schedule_id,
                    _target(r.definition.model_dump()),
                    _trigger(r.definition.model_dump(mode="json")),
                    r.definition.task_id,
                    status_of(r),
                    r.fires[-1]["scheduled_for"] if r.fires else "-",
                    r.misses[-1]["scheduled_for"] if r.misses else "-",
                    _created_by(r.definition),
                )
                for r in records
            ],
            empty="no schedules; `nexus schedule add`",
        )

    run(output, body)


def _created_by(definition: ScheduleDefined) -> str:
    """An agent's own schedule names its agent and the run that made it; an operator's '-'."""
    if definition.created_by_run is None:
        return "-"
    return f"{definition.created_by_agent} (run {definition.created_by_run})"


@app.command("show")
def show_cmd(
    ctx: typer.Context, schedule_id: ScheduleArg, output: OutputOpt = Output.TABLE
) -> None:
    """One schedule: its definition, its recent fires and misses."""
    g = globals_of(ctx)

    async def body() -> None:
        async with Session(resolve_target(g), g.timeout) as s:
            rec = await _one(s, schedule_id)
        data = rec.as_dict(recent=RECENT)
        if output is Output.JSON:
            print_json(data)
            return
        d = data["definition"]
        console.print(f"schedule {rec.schedule_id}  {status_of(rec)}", markup=False)
        for label, value in (
            ("target", _target(d)),
            ("trigger", _trigger(d)),
            ("task", d.get("task_id")),
            ("input", d.get("input")),
            ("missed", d.get("missed_policy") or "scheduler default"),
            ("overlap", d.get("overlap_policy") or "scheduler default"),
            ("defined", f"{data['defined_at']} ({ago(data['defined_at'])})"),
            ("by", None if rec.definition.created_by_run is None else _created_by(rec.definition)),
        ):
            if value:
                console.print(f"  {label:<8} {value}", markup=False)
        if not data["fires"] and not data["misses"]:
            console.print("  no fires yet", markup=False)
        for f in data["fires"]:
            console.print(f"  fired    {f['scheduled_for']}  {f['run_id']}", markup=False)
        for m in data["misses"]:
            console.print(f"  missed   {m['scheduled_for']}  {m['reason']}", markup=False)

    run(output, body)


def _set_enabled(ctx: typer.Context, schedule_id: str, enabled: bool, output: Output) -> None:
    g = globals_of(ctx)
    verb: Literal["paused", "resumed"] = "resumed" if enabled else "paused"

    async def body() -> None:
        async with Session(resolve_target(g), g.timeout) as s:
            rec = await _one(s, schedule_id)
            changed = await s.publish_guarded(set_enabled(s.bus, rec, enabled, "cli"))
            if not changed:
                message(
                    output,
                    f"schedule {schedule_id} is already {'active' if enabled else 'paused'}",
                    {"schedule_id": schedule_id, "enabled": enabled, "changed": False},
                )
                return
        message(
            output,
            f"schedule {schedule_id} {verb}",
            {"schedule_id": schedule_id, "enabled": enabled, "changed": True},
        )

    run(output, body)


@app.command("pause")
def pause_cmd(
    ctx: typer.Context, schedule_id: ScheduleArg, output: OutputOpt = Output.TABLE
) -> None:
    """Stop a schedule firing (re-defines it with enabled false)."""
    _set_enabled(ctx, schedule_id, False, output)


@app.command("resume")
def resume_cmd(
    ctx: typer.Context, schedule_id: ScheduleArg, output: OutputOpt = Output.TABLE
) -> None:
    """Let a paused schedule fire again (fires missed meanwhile follow its missed policy)."""
    _set_enabled(ctx, schedule_id, True, output)


@app.command("rm")
def rm_cmd(ctx: typer.Context, schedule_id: ScheduleArg, output: OutputOpt = Output.TABLE) -> None:
    """Remove a schedule; runs it already started go on."""
    g = globals_of(ctx)

    async def body() -> None:
        async with Session(resolve_target(g), g.timeout) as s:
            await _one(s, schedule_id)
            await define(s, schedule_id, ScheduleRemoved(removed_by=whoami()))
        message(
            output, f"schedule {schedule_id} removed", {"schedule_id": schedule_id, "removed": True}
        )

    run(output, body)
