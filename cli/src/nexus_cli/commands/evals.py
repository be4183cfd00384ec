"""`nexus eval apply|delete|ls|history|run|show|ls-runs`: eval suites and the lab's eval runs.

Suites are catalog items (NEXUS_CATALOG, kind `eval`); eval runs are the lab's (NEXUS_EVALS,
its queries ``nexus.lab.v1.evals.get|list``; docs/lab.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from pathlib import Path
from typing import Annotated, Any

import typer
from nexus_events.contract import subjects
from nexus_events.contract.streams import CATALOG, EVALS
from nexus_events.events import EvalRequested
from nexus_events.events.evals import AgentRevision, EvalEvent, EvalReport, EvalStatus
from nexus_events.transport.catalog_commands import apply_eval, delete_eval
from pydantic import ValidationError

from nexus_cli.apply_sources import PathsArg, apply_paths, file_option
from nexus_cli.client import Session, check_token, whoami
from nexus_cli.errors import CliError, ExitCode
from nexus_cli.eval_requests import await_eval_run_id, describe_eval_event
from nexus_cli.eval_suites import load_suites
from nexus_cli.evalview import LIST_COLUMNS, headline, list_row, sections
from nexus_cli.follow import follow
from nexus_cli.options import Output, OutputOpt, globals_of, run
from nexus_cli.output import console, emit, message, print_json, table
from nexus_cli.target import resolve_target

app = typer.Typer(
    help="Evaluations: suites (apply, delete, ls, history) and the lab's eval runs"
    " (run, show, ls-runs).",
    no_args_is_help=True,
)

LAB = "the lab"
FileOpt = Annotated[list[Path] | None, file_option("A suite YAML file or a directory of them")]
SuiteArg = Annotated[str, typer.Argument(metavar="SUITE", help="Suite id.")]
EvalRunArg = Annotated[str, typer.Argument(metavar="EVAL_RUN", help="Eval run id.")]
# The events an eval run ends with, and the exit code of each (docs/cli.md).
EVAL_ENDS = {EvalEvent.COMPLETED: ExitCode.OK, EvalEvent.FAILED: ExitCode.RUN_FAILED}
# Seconds between asks for the report while the lab's projection catches up with the stream.
REPORT_POLL_SECONDS = 0.1


@app.command("apply")
def apply_cmd(
    ctx: typer.Context,
    file: FileOpt = None,
    paths: PathsArg = None,
    output: OutputOpt = Output.TABLE,
) -> None:
    """Validate every suite first (one line naming the file and the problem, exit 2, nothing
    sent), then publish each as the suite's next revision."""
    g = globals_of(ctx)

    async def body() -> None:
        loaded = load_suites(apply_paths(file, paths))
        async with Session(resolve_target(g), g.timeout) as s:
            for item in loaded:
                await s.publish_guarded(apply_eval(s.bus, item.document, applied_by=whoami()))
        applied = [{"id": x.document.id, "file": str(x.path)} for x in loaded]
        if output is Output.JSON:
            print_json({"applied": applied})
            return
        for a in applied:
            console.print(f"eval/{a['id']} applied ({a['file']})", markup=False)

    run(output, body)


@app.command("delete")
def delete_cmd(ctx: typer.Context, suite: SuiteArg, output: OutputOpt = Output.TABLE) -> None:
    """Delete a suite (its revisions stay, and the eval runs pinned to them)."""
    g = globals_of(ctx)

    async def body() -> None:
        check_token(suite, "suite id")
        async with Session(resolve_target(g), g.timeout) as s:
            if not await _suite_events(s, suite):
                raise CliError(
                    f"no suite {suite!r}", hint="`nexus eval ls`", code=ExitCode.NOT_FOUND
                )
            await s.publish_guarded(delete_eval(s.bus, suite, deleted_by=whoami()))
        message(output, f"eval/{suite} deleted", {"deleted": suite})

    run(output, body)


async def _suite_events(s: Session, suite: str | None = None) -> list[dict[str, Any]]:
    """Every apply/delete of suites (of `suite` only, if named), oldest first, from the
    NEXUS_CATALOG stream (the audit record)."""
    entries = []
    async for d in s.bus.replay(CATALOG, filter_subject=subjects.catalog_events_filter("eval")):
        item = d.address.ids.get("id")
        if suite is not None and item != suite:
            continue
        body = d.event.model_dump(mode="json")
        entries.append(
            {
                "id": item,
                "seq": d.envelope.stream_seq,
                "event": d.address.event,
                "time": d.envelope.timestamp.isoformat() if d.envelope.timestamp else None,
                "by": body.get("applied_by") or body.get("deleted_by"),
                "body": body,
            }
        )
    return entries


def current_suites(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The suites not deleted, each at its latest revision (the count of its applies, as the
    lab numbers them), by id."""
    suites: dict[str, dict[str, Any]] = {}
    revisions: dict[str, int] = {}
    for e in entries:
        if e["event"] == "applied":
            revisions[e["id"]] = revisions.get(e["id"], 0) + 1
            suites[e["id"]] = {"revision": revisions[e["id"]], "suite": e["body"]["suite"]}
        else:
            suites.pop(e["id"], None)
    return [suites[k] for k in sorted(suites)]


@app.command("ls")
def ls_cmd(ctx: typer.Context, output: OutputOpt = Output.TABLE) -> None:
    """List the suites with their revision, cases and graders (from NEXUS_CATALOG)."""
    g = globals_of(ctx)

    async def body() -> None:
        async with Session(resolve_target(g), g.timeout) as s:
            suites = current_suites(await _suite_events(s))
        rows = [
            (
                x["suite"]["id"],
                x["revision"],
                x["suite"].get("agent") or "",
                len(x["suite"]["cases"]),
                ", ".join(gr.get("name") or gr["kind"] for gr in x["suite"].get("graders", [])),
                x["suite"].get("description", ""),
            )
            for x in suites
        ]
        emit(
            output,
            {"suites": suites},
            ("ID", "REV", "AGENT", "CASES", "GRADERS", "DESCRIPTION"),
            rows,
            empty="no suites; apply some with `nexus eval apply evals/`",
        )

    run(output, body)


@app.command("history")
def history_cmd(ctx: typer.Context, suite: SuiteArg, output: OutputOpt = Output.TABLE) -> None:
    """Every apply/delete of the suite, from the NEXUS_CATALOG stream (the audit record)."""
    g = globals_of(ctx)

    async def body() -> None:
        check_token(suite, "suite id")
        async with Session(resolve_target(g), g.timeout) as s:
            entries = await _suite_events(s, suite)
        if not entries:
            raise CliError(f"no history for suite {suite!r}", code=ExitCode.NOT_FOUND)
        emit(
            output,
            {"suite": suite, "history": entries},
            ("SEQ", "EVENT", "TIME", "BY", "CASES"),
            [
                (
                    e["seq"],
                    e["event"],
                    e["time"],
                    e["by"],
                    len(e["body"].get("suite", {}).get("cases", [])) or "",
                )
                for e in entries
            ],
        )

    run(output, body)


def build_eval_request(
    suite: str,
    agents: list[str],
    *,
    trials: int | None,
    concurrency: int,
    suite_revision: int | None,
) -> EvalRequested:
    """The validated request; a one-line `CliError` (exit 2) for a bad id or AGENT@N."""
    check_token(suite, "suite id")
    if not agents:
        raise CliError("name the revisions to compare: --agent AGENT@N (repeatable)")
    for text in agents:
        try:
            AgentRevision.parse(text)
        except ValueError as exc:
            raise CliError(str(exc), code=ExitCode.INVALID) from None
    try:
        return EvalRequested(
            suite=suite,
            suite_revision=suite_revision,
            agents=agents,
            trials=trials,
            concurrency=concurrency,
            requested_by=whoami(),
        )
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        where = ".".join(str(p) for p in first["loc"]) or "request"
        msg = first["msg"].removeprefix("Value error, ")
        raise CliError(f"invalid eval request: {where}: {msg}", code=ExitCode.INVALID) from None


@app.command("run")
def run_cmd(
    ctx: typer.Context,
    suite: SuiteArg,
    agent: Annotated[
        list[str] | None,
        typer.Option("--agent", "-a", help="An agent revision AGENT@N to evaluate (repeatable)."),
    ] = None,
    trials: Annotated[
        int | None, typer.Option(min=1, max=100, help="Trials per case and revision.")
    ] = None,
    concurrency: Annotated[int, typer.Option(min=1, max=64, help="Most case runs at once.")] = 4,
    suite_revision: Annotated[
        int | None, typer.Option("--suite-revision", min=1, help="Default: the latest.")
    ] = None,
    wait: Annotated[
        bool, typer.Option("--wait", help="Follow it to its end, then print the report.")
    ] = False,
    wait_for: Annotated[
        float | None, typer.Option("--wait-for", help="With --wait: most seconds to wait.")
    ] = None,
    output: OutputOpt = Output.TABLE,
) -> None:
    """Ask the lab to run SUITE for each --agent revision; print the eval run id it picks.
    --wait prints one line per case graded, then the report; exits 0 if the eval run
    completed, 1 if it failed, 5 if --wait-for ran out."""
    g = globals_of(ctx)

    async def body() -> None:
        request = build_eval_request(
            suite,
            agent or [],
            trials=trials,
            concurrency=concurrency,
            suite_revision=suite_revision,
        )
        async with Session(resolve_target(g), g.timeout) as s:
            eval_run_id = await await_eval_run_id(s, request, within=g.timeout)
            if not wait:
                message(output, eval_run_id, {"eval_run_id": eval_run_id, "suite": suite})
                return
            if output is Output.TABLE:
                console.print(f"eval run {eval_run_id} requested", markup=False)
            deadline = None if wait_for is None else time.monotonic() + wait_for
            end, last = await _watch(s, eval_run_id, output, deadline)
            if end is EvalEvent.FAILED:
                # Nothing was graded to report: the failure's line says why.
                if output is Output.JSON:
                    print_json({"eval_run_id": eval_run_id, "status": end.value} | last)
                raise typer.Exit(int(EVAL_ENDS[end]))
            report = await _settled_report(s, eval_run_id, within=g.timeout)
        _print_report(report, output)

    run(output, body)


async def _watch(
    s: Session, eval_run_id: str, output: Output, deadline: float | None
) -> tuple[EvalEvent, dict[str, Any]]:
    """Print the eval run's events (stored, then live) until it ends; the ending event
    and its body."""
    events = follow(s.bus, EVALS, subjects.eval_events_filter(eval_run_id))

    async def consume() -> tuple[EvalEvent, dict[str, Any]]:
        async with contextlib.aclosing(events) as stream:
            async for d in stream:
                name = EvalEvent(d.address.event or "")
                if output is Output.TABLE:
                    console.print(describe_eval_event(name, d.event), markup=False)
                if name in EVAL_ENDS:
                    return name, d.event.model_dump(mode="json")
        raise CliError(f"the events of eval run {eval_run_id} ended", code=ExitCode.UNAVAILABLE)

    timeout = None if deadline is None else max(deadline - time.monotonic(), 0.1)
    try:
        return await asyncio.wait_for(consume(), timeout)
    except TimeoutError:
        raise CliError(
            f"eval run {eval_run_id} had not ended when the wait ran out",
            hint=f"it goes on; `nexus eval show {eval_run_id}`",
            code=ExitCode.TIMEOUT,
        ) from None


async def _get_report(s: Session, eval_run_id: str) -> EvalReport:
    check_token(eval_run_id, "eval run id")
    try:
        data = await s.query(subjects.LAB_EVALS_GET, {"eval_run_id": eval_run_id}, service=LAB)
    except CliError as exc:
        if exc.code is ExitCode.NOT_FOUND:
            exc.message, exc.hint = f"no eval run {eval_run_id!r}", "`nexus eval ls-runs`"
        raise
    try:
        return EvalReport.model_validate(data)
    except ValidationError as exc:
        raise CliError(
            f"the lab answered an unreadable report: {exc.errors()[0]['msg']}",
            code=ExitCode.UNAVAILABLE,
        ) from None


async def _settled_report(s: Session, eval_run_id: str, *, within: float) -> EvalReport:
    """The report once the lab's projection has applied the completion the stream showed
    (it folds NEXUS_EVALS a moment after the event is stored); exit 5 after `within` s."""
    deadline = time.monotonic() + within
    while True:
        try:
            report = await _get_report(s, eval_run_id)
            if report.status == EvalStatus.COMPLETED.value:
                return report
        except CliError as exc:
            if exc.code is not ExitCode.NOT_FOUND:
                raise
        if time.monotonic() > deadline:
            raise CliError(
                f"eval run {eval_run_id} completed but the lab's report does not show it yet",
                hint=f"the lab may be behind: `nexus eval show {eval_run_id}` in a moment",
                code=ExitCode.TIMEOUT,
            )
        await asyncio.sleep(REPORT_POLL_SECONDS)


def _print_report(report: EvalReport, output: Output) -> None:
    if output is Output.JSON:
        print_json(report.model_dump(mode="json"))
        return
    for line in headline(report):
        console.print(line, markup=False)
    for section in sections(report):
        console.print(table(section.title, section.columns, section.rows))


@app.command("show")
def show_cmd(ctx: typer.Context, eval_run: EvalRunArg, output: OutputOpt = Output.TABLE) -> None:
    """An eval run's report: per revision the pass rate with its 95% interval and the means
    per case run, then per case and revision, and the cases that flipped."""
    g = globals_of(ctx)

    async def body() -> None:
        async with Session(resolve_target(g), g.timeout) as s:
            report = await _get_report(s, eval_run)
        _print_report(report, output)

    run(output, body)


@app.command("ls-runs")
def ls_runs_cmd(
    ctx: typer.Context,
    suite: Annotated[str | None, typer.Option(help="Only this suite's eval runs.")] = None,
    limit: Annotated[int, typer.Option(min=1, max=500, help="Most eval runs.")] = 50,
    output: OutputOpt = Output.TABLE,
) -> None:
    """The eval runs, newest first, with each revision's pass rate so far."""
    g = globals_of(ctx)

    async def body() -> None:
        if suite is not None:
            check_token(suite, "suite id")
        query: dict[str, Any] = {"limit": limit} | ({"suite": suite} if suite else {})
        async with Session(resolve_target(g), g.timeout) as s:
            data = await s.query(subjects.LAB_EVALS_LIST, query, service=LAB)
        reports = [EvalReport.model_validate(x) for x in data.get("evals", [])]
        emit(
            output,
            data,
            LIST_COLUMNS,
            [list_row(r) for r in reports],
            empty="no eval runs; start one with `nexus eval run SUITE --agent AGENT@N`",
        )

    run(output, body)
