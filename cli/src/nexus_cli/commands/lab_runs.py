"""The lab's commands on runs (docs/lab.md): `nexus replay`, `fork` and `golden`."""

from __future__ import annotations

from typing import Annotated, Any

import typer
from nexus_events.contract import subjects
from nexus_events.contract.codec import Decoded
from nexus_events.contract.runstate import RunEvent, RunStatus, is_terminal
from nexus_events.events import LabSpec, Origin, RunDiverged, RunGoldenMarked, RunRequested
from nexus_events.events.lab_specs import LabMode, OnDivergence
from nexus_events.events.queries import RunView as RunRow
from pydantic import ValidationError

from nexus_cli.client import Session, check_token, whoami
from nexus_cli.commands.approvals import cli_user
from nexus_cli.commands.runs import build_run_request, publish_run, track_run
from nexus_cli.errors import CliError, ExitCode
from nexus_cli.options import Output, OutputOpt, RunArg, globals_of, run
from nexus_cli.output import console, message, print_json
from nexus_cli.runview import RunView
from nexus_cli.target import resolve_target

JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON (the same as -o json).")]
WaitOpt = Annotated[
    bool, typer.Option("--wait", help="Follow the new run to its end; exit with its outcome.")
]
AgentRevisionOpt = Annotated[
    int | None,
    typer.Option("--agent-revision", help="Assemble with this catalog revision of the agent."),
]


def output_of(output: Output, as_json: bool) -> Output:
    return Output.JSON if as_json else output


def skill_revisions(values: list[str]) -> dict[str, int]:
    """``NAME@REV`` options as {name: revision}; a one-line CliError (exit 2) otherwise."""
    out: dict[str, int] = {}
    for value in values:
        name, sep, rev = value.rpartition("@")
        if not sep or not name or not rev.isdigit() or int(rev) < 1:
            raise CliError(
                f"invalid --skill {value!r}: use NAME@REVISION (a revision is 1 or more)",
                code=ExitCode.INVALID,
            )
        check_token(name, "skill name")
        if name in out:
            raise CliError(f"--skill {name} given twice", code=ExitCode.INVALID)
        out[name] = int(rev)
    return out


def _revision(value: int | None) -> int | None:
    if value is not None and value < 1:
        raise CliError(
            f"invalid --agent-revision {value}: a revision is 1 or more", code=ExitCode.INVALID
        )
    return value


async def source_run(s: Session, run_id: str) -> RunRow:
    """The run a lab run starts from, as core projects it; exit 2 if there is none."""
    try:
        row = await s.get_run(run_id)
    except CliError as exc:
        if exc.code is ExitCode.NOT_FOUND:
            raise CliError(f"no run {run_id!r} to start from", code=ExitCode.INVALID) from None
        raise
    return RunRow.model_validate(row)


def lab_request(
    source: RunRow,
    lab: LabSpec,
    *,
    agent_revision: int | None = None,
    skills: dict[str, int] | None = None,
    model: str | None = None,
) -> tuple[str, RunRequested]:
    """A new run id and the request of a lab run of `source` (origin lab, its overrides)."""
    if source.agent_id is None:
        raise CliError(f"run {source.run_id} names no agent", code=ExitCode.INVALID)
    rid, base = build_run_request(
        agent=source.agent_id,
        requested_by=whoami(),
        task=source.task_id,
        input_text=source.input or "",
    )
    try:
        request = RunRequested.model_validate(
            {
                **base.model_dump(),
                "origin": Origin.LAB,
                "agent_revision": agent_revision,
                "skill_revisions": skills or {},
                "model": model,
                "lab": lab,
            }
        )
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        where = ".".join(str(p) for p in first["loc"]) or "request"
        raise CliError(f"invalid lab request: {where}: {first['msg']}") from None
    return rid, request


class LabWatch:
    """A lab run followed to its end: its view, and the first divergence if one came."""

    def __init__(self, run_id: str) -> None:
        self.view = RunView(run_id)
        self.divergence: RunDiverged | None = None

    async def see(self, name: str, d: Decoded) -> None:
        first = name == RunEvent.DIVERGED and self.divergence is None
        if first and isinstance(d.event, RunDiverged):
            self.divergence = d.event

    def as_dict(self) -> dict[str, Any]:
        diverged = self.divergence
        return {
            **self.view.as_dict(),
            "divergence": None
            if diverged is None
            else diverged.model_dump(mode="json", exclude={"index", "recorded", "actual"}),
        }


async def _follow(s: Session, run_id: str) -> LabWatch:
    watch = LabWatch(run_id)
    await track_run(s, watch.view, watch.see, None)
    return watch


def _report_end(watch: LabWatch, output: Output, *, replay: bool) -> None:
    """Print how the lab run ended; exit 1 unless it completed."""
    view, diverged = watch.view, watch.divergence
    if output is Output.JSON:
        print_json(watch.as_dict())
    else:
        if diverged is not None:
            went = "stopped" if diverged.action is OnDivergence.STOP else "went on live"
            console.print(
                f"first divergence at turn {diverged.turn} ({diverged.kind.value}):"
                f" {diverged.detail} [{went}]",
                markup=False,
            )
        elif replay and view.status == RunStatus.COMPLETED:
            console.print(f"no divergence: reproduced {view.turns} turns", markup=False)
        ending = f"{view.reason}: {view.message}" if view.message else view.reason or ""
        console.print(
            f"run {view.run_id} {view.status}" + (f" ({ending})" if ending else ""), markup=False
        )
    code = view.exit_code()
    if code is not ExitCode.OK:
        raise typer.Exit(int(code))


async def _start(
    s: Session, rid: str, request: RunRequested, output: Output, wait: bool, *, replay: bool
) -> None:
    await publish_run(s, rid, request)
    if not wait:
        message(output, rid, {"run_id": rid, "status": RunStatus.REQUESTED.value})
        return
    if output is Output.TABLE:
        console.print(f"run {rid} requested", markup=False)
    _report_end(await _follow(s, rid), output, replay=replay)


def register(app: typer.Typer) -> None:
    """Register `replay`, `fork` and `golden`."""

    @app.command("replay")
    def replay_cmd(
        ctx: typer.Context,
        source_id: RunArg,
        agent_revision: AgentRevisionOpt = None,
        skill: Annotated[
            list[str] | None,
            typer.Option("--skill", help="NAME@REV: assemble this skill revision (repeatable)."),
        ] = None,
        model: Annotated[str | None, typer.Option(help="Use this model name.")] = None,
        until_divergence: Annotated[
            bool,
            typer.Option(
                "--until-divergence/--continue-live",
                help="At the first divergence stop (default), or go on with the live model.",
            ),
        ] = True,
        wait: WaitOpt = False,
        as_json: JsonOpt = False,
        output: OutputOpt = Output.TABLE,
    ) -> None:
        """Run RUN's task again, served RUN's recorded replies while the requests match;
        prints the new run id, and with --wait its first divergence (exit 0 once completed)."""
        g = globals_of(ctx)
        out = output_of(output, as_json)

        async def body() -> None:
            check_token(source_id, "run id")
            skills = skill_revisions(skill or [])
            revision = _revision(agent_revision)
            async with Session(resolve_target(g), g.timeout) as s:
                source = await source_run(s, source_id)
                on = OnDivergence.STOP if until_divergence else OnDivergence.LIVE
                lab = LabSpec(mode=LabMode.REPLAY, source_run_id=source_id, on_divergence=on)
                rid, request = lab_request(
                    source, lab, agent_revision=revision, skills=skills, model=model
                )
                await _start(s, rid, request, out, wait, replay=True)

        run(out, body)

    @app.command("fork")
    def fork_cmd(
        ctx: typer.Context,
        source_id: RunArg,
        at_turn: Annotated[
            int, typer.Option("--at-turn", help="Keep RUN's turns 1..N; go on from N + 1.")
        ],
        agent_revision: AgentRevisionOpt = None,
        input_text: Annotated[
            str | None, typer.Option("--input", "-i", help="A message added after turn N.")
        ] = None,
        wait: WaitOpt = False,
        as_json: JsonOpt = False,
        output: OutputOpt = Output.TABLE,
    ) -> None:
        """A new run with RUN's conversation and workspace up to turn N, then live; prints its
        id, and with --wait follows it to its end (exit 0 if it completed)."""
        g = globals_of(ctx)
        out = output_of(output, as_json)

        async def body() -> None:
            check_token(source_id, "run id")
            revision = _revision(agent_revision)
            if at_turn < 1:
                raise CliError(f"invalid --at-turn {at_turn}: turns count from 1")
            async with Session(resolve_target(g), g.timeout) as s:
                source = await source_run(s, source_id)
                if at_turn > source.turns:
                    raise CliError(
                        f"run {source_id} has {source.turns} turns; cannot fork at turn {at_turn}"
                    )
                lab = LabSpec(
                    mode=LabMode.FORK, source_run_id=source_id, at_turn=at_turn, input=input_text
                )
                rid, request = lab_request(source, lab, agent_revision=revision)
                await _start(s, rid, request, out, wait, replay=False)

        run(out, body)

    @app.command("golden")
    def golden_cmd(
        ctx: typer.Context,
        run_id: RunArg,
        note: Annotated[str, typer.Option(help="Why it is (or is no longer) golden.")] = "",
        unmark: Annotated[bool, typer.Option("--unmark", help="Take the mark back.")] = False,
        as_json: JsonOpt = False,
        output: OutputOpt = Output.TABLE,
    ) -> None:
        """Mark a completed run golden (an eval case, docs/lab.md), or --unmark it."""
        g = globals_of(ctx)
        out = output_of(output, as_json)

        async def body() -> None:
            check_token(run_id, "run id")
            async with Session(resolve_target(g), g.timeout) as s:
                row = RunRow.model_validate(await s.get_run(run_id))
                if not unmark:
                    refuse_ungolden(row)
                mark = RunGoldenMarked(golden=not unmark, marked_by=cli_user(s.target), note=note)
                await s.publish_guarded(
                    s.bus.publish(subjects.run_event(run_id, RunGoldenMarked), mark)
                )
            verb = "unmarked" if unmark else "marked"
            message(
                out,
                f"run {run_id} {verb} golden",
                {"run_id": run_id, "golden": mark.golden, "marked_by": mark.marked_by},
            )

        run(out, body)


def refuse_ungolden(row: RunRow) -> None:
    """Only a run that ended and completed can be golden: a one-line CliError (exit 2)."""
    status = row.status or "unknown"
    if row.status is None or not is_terminal(row.status):
        raise CliError(f"run {row.run_id} has not ended ({status}): only a completed run is golden")
    if row.status != RunStatus.COMPLETED:
        why = f"{status}, {row.reason}" if row.reason else status
        raise CliError(f"run {row.run_id} did not complete ({why}): only a completed run is golden")
