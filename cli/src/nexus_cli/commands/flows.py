"""`nexus flows apply|ls|show|history|rm`: flow definitions in the catalog.

(`nexus flow ...`, singular, runs them.) A set of files is applied all or nothing: each file
is validated (the contract's `parse_flow`) and every agent its steps name must be in core's
catalog; any problem is one line naming the file, the step and the field, exit 2, and nothing
is published.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Annotated, Any

import typer
import yaml
from nexus_events.contract import subjects
from nexus_events.contract.documents import WHOLE, parse_flow
from nexus_events.contract.streams import CATALOG
from nexus_events.errors import DocumentInvalid
from nexus_events.events import FlowDefinition
from nexus_events.transport.catalog_commands import apply_flow, delete_flow

from nexus_cli.apply_sources import PathsArg, apply_paths, file_option
from nexus_cli.client import Session, check_token, whoami
from nexus_cli.commands.agents import APPLY_WAIT_SECONDS, WaitOpt, wait_visible
from nexus_cli.documents import Loaded, document_files
from nexus_cli.errors import CliError, ExitCode
from nexus_cli.options import Output, OutputOpt, globals_of, run
from nexus_cli.output import console, emit, print_json
from nexus_cli.target import resolve_target

app = typer.Typer(help="Flow definitions: apply from YAML, list, show, history, remove.")

FLOW_SUFFIXES = (".yaml", ".yml")
FileOpt = Annotated[
    list[Path] | None, file_option("A flow YAML file, or a directory of *.yaml / *.yml files")
]
FlowArg = Annotated[str, typer.Argument(metavar="FLOW", help="Flow id.")]
NOTHING_APPLIED = "nothing was applied; fix the file(s) and apply again"


def _refuse(problems: list[str]) -> CliError:
    """The first problem as the error line, any others under it; exit 2."""
    return CliError(problems[0], details=problems[1:], hint=NOTHING_APPLIED, code=ExitCode.INVALID)


def load_flows(paths: list[Path]) -> list[Loaded[FlowDefinition]]:
    """Every file parsed and validated; all problems, one line each, or the flows."""
    loaded: list[Loaded[FlowDefinition]] = []
    problems: list[str] = []
    for path in document_files(paths, FLOW_SUFFIXES):
        try:
            text = path.read_text()
        except (OSError, UnicodeDecodeError) as exc:
            problems.append(f"{path}: cannot read: {exc}")
            continue
        try:
            loaded.append(Loaded(path, parse_flow(text)))
        except DocumentInvalid as exc:
            problems.extend(
                f"{path}: {err.msg}" if err.loc == WHOLE else f"{path}: {err.loc}: {err.msg}"
                for err in exc.errors
            )
    seen: dict[str, Path] = {}
    for item in loaded:
        first = seen.setdefault(item.document.id, item.path)
        if first != item.path:
            problems.append(f"{item.path}: flow {item.document.id!r} is also defined in {first}")
    if problems:
        raise _refuse(problems)
    return loaded


# How long `flows apply` waits for core's catalog to show agents it does not list yet.
AGENT_CATCH_UP_SECONDS = 3.0


async def _catalog_agents(s: Session) -> set[str]:
    listed = await s.query(subjects.CORE_CATALOG_AGENTS_LIST)
    return {a["definition"]["id"] for a in listed.get("agents", [])}


def unknown_agents(loaded: list[Loaded[FlowDefinition]], agents: set[str]) -> list[str]:
    """One line per step whose agent is not in the catalog."""
    return [
        f"{item.path}: step {step.id!r}: agent {agent!r} is not in the catalog"
        for item in loaded
        for step in item.document.steps
        if (agent := getattr(step, "agent", None)) is not None and agent not in agents
    ]


@app.command("apply")
def apply_cmd(
    ctx: typer.Context,
    file: FileOpt = None,
    paths: PathsArg = None,
    wait: WaitOpt = True,
    output: OutputOpt = Output.TABLE,
) -> None:
    """Validate every file (and that its agents exist), then apply them all, or none."""
    g = globals_of(ctx)

    async def body() -> None:
        loaded = load_flows(apply_paths(file, paths))
        async with Session(resolve_target(g), g.timeout) as s:
            problems = unknown_agents(loaded, await _catalog_agents(s))
            # Agents applied a moment ago (`agents apply` then `flows apply`) may not be in
            # core's catalog projection yet: ask again for a few seconds before refusing.
            deadline = time.monotonic() + AGENT_CATCH_UP_SECONDS
            while problems and time.monotonic() < deadline:
                await asyncio.sleep(0.25)
                problems = unknown_agents(loaded, await _catalog_agents(s))
            if problems:
                raise _refuse(problems)
            applied: list[dict[str, Any]] = []
            for item in loaded:
                await s.publish_guarded(apply_flow(s.bus, item.document, applied_by=whoami()))
                applied.append({"id": item.document.id, "file": str(item.path)})
            if wait:
                for entry, item in zip(applied, loaded, strict=True):
                    entry["revision"] = await _visible_revision(s, item.document)
        if output is Output.JSON:
            print_json({"applied": applied})
            return
        for a in applied:
            rev = f" revision {a['revision']}" if "revision" in a else ""
            console.print(f"flow/{a['id']} applied{rev} ({a['file']})", markup=False)

    run(output, body)


async def _visible_revision(s: Session, definition: FlowDefinition) -> int:
    """Wait until core serves `definition` as the flow's latest revision; that revision."""
    want = definition.model_dump(mode="json")
    seen: dict[str, Any] = {}

    def check(reply: dict[str, Any]) -> bool:
        seen.update(reply)
        return reply.get("definition") == want

    await wait_visible(
        s, subjects.CORE_CATALOG_FLOWS_GET, {"id": definition.id}, check, f"flow/{definition.id}"
    )
    return int(seen["revision"])


@app.command("ls")
def ls_cmd(ctx: typer.Context, output: OutputOpt = Output.TABLE) -> None:
    """List flows with their catalog revision, steps and agents."""
    g = globals_of(ctx)

    async def body() -> None:
        async with Session(resolve_target(g), g.timeout) as s:
            data = await s.query(subjects.CORE_CATALOG_FLOWS_LIST)
        rows = []
        for f in data.get("flows", []):
            definition = f["definition"]
            agents = dict.fromkeys(
                step["agent"] for step in definition["steps"] if step.get("agent")
            )
            rows.append((
                definition["id"],
                f["revision"],
                len(definition["steps"]),
                ", ".join(agents),
                definition.get("description", ""),
            ))  # fmt: skip
        emit(
            output,
            data,
            ("ID", "REV", "STEPS", "AGENTS", "DESCRIPTION"),
            rows,
            empty="no flows; apply some with `nexus flows apply -f DIR`",
        )

    run(output, body)


@app.command("show")
def show_cmd(
    ctx: typer.Context,
    flow_id: FlowArg,
    revision: Annotated[
        int | None,
        typer.Option("--revision", "-r", min=1, help="That revision; the latest by default."),
    ] = None,
    output: OutputOpt = Output.TABLE,
) -> None:
    """The flow's definition as YAML that `nexus flows apply` takes back (JSON with -o json)."""
    g = globals_of(ctx)

    async def body() -> None:
        check_token(flow_id, "flow id")
        query: dict[str, Any] = {"id": flow_id}
        if revision is not None:
            query["revision"] = revision
        async with Session(resolve_target(g), g.timeout) as s:
            try:
                data = await s.query(subjects.CORE_CATALOG_FLOWS_GET, query)
            except CliError as exc:
                if exc.code is ExitCode.NOT_FOUND:
                    what = flow_id if revision is None else f"{flow_id} revision {revision}"
                    exc.message, exc.hint = f"no flow {what}", "`nexus flows history FLOW`"
                raise
        if output is Output.JSON:
            print_json(data)
            return
        console.print(f"# flow/{flow_id} revision {data['revision']}", markup=False)
        document = yaml.safe_dump(compact(data["definition"]), sort_keys=False, width=100)
        console.print(document.rstrip(), markup=False)

    run(output, body)


def compact(value: Any) -> Any:
    """`value` without None, "", [] and {} entries: each is its field's default (or means
    the same), so the YAML stays short and still applies back to the same definition."""
    if isinstance(value, dict):
        out = {k: compact(v) for k, v in value.items()}
        return {k: v for k, v in out.items() if v not in (None, "", [], {})}
    if isinstance(value, list):
        return [compact(v) for v in value]
    return value


@app.command("history")
def history_cmd(ctx: typer.Context, flow_id: FlowArg, output: OutputOpt = Output.TABLE) -> None:
    """Every apply/delete of the flow from NEXUS_CATALOG: revision made, who, when."""
    g = globals_of(ctx)

    async def body() -> None:
        check_token(flow_id, "flow id")
        entries: list[dict[str, Any]] = []
        async with Session(resolve_target(g), g.timeout) as s:
            async for d in s.bus.replay(
                CATALOG, filter_subject=subjects.catalog_events_filter("flow")
            ):
                if d.address.ids.get("id") != flow_id:
                    continue
                event = d.event.model_dump(mode="json")
                entries.append({
                    "seq": d.envelope.stream_seq,
                    "event": d.address.event,
                    "time": d.envelope.timestamp.isoformat() if d.envelope.timestamp else None,
                    "by": event.get("applied_by") or event.get("deleted_by"),
                    "body": event,
                })  # fmt: skip
        if not entries:
            raise CliError(f"no history for flow {flow_id!r}", code=ExitCode.NOT_FOUND)
        number_revisions(entries)
        emit(
            output,
            {"flow_id": flow_id, "history": entries},
            ("SEQ", "REV", "EVENT", "TIME", "BY", "STEPS"),
            [
                (
                    e["seq"],
                    e["revision"] or "-",
                    e["event"],
                    e["time"],
                    e["by"],
                    len((e["body"].get("definition") or {}).get("steps") or []) or "",
                )
                for e in entries
            ],
        )

    run(output, body)


def number_revisions(entries: list[dict[str, Any]]) -> None:
    """Give each entry the catalog revision it made, None if none: core's rule (an unchanged
    re-apply, or a delete of what is not there, adds no revision; history is never cut)."""
    revision, current = 0, None  # current: the live definition, None when absent
    for e in entries:
        definition = e["body"].get("definition")
        if e["event"] == "applied" and definition is not None and definition != current:
            revision, current = revision + 1, definition
            e["revision"] = revision
        elif e["event"] == "deleted" and current is not None:
            revision, current = revision + 1, None
            e["revision"] = revision
        else:
            e["revision"] = None


@app.command("rm")
def rm_cmd(
    ctx: typer.Context, flow_id: FlowArg, wait: WaitOpt = True, output: OutputOpt = Output.TABLE
) -> None:
    """Delete the flow: no new run can start it; its revisions stay (and runs pinned to one)."""
    g = globals_of(ctx)

    async def body() -> None:
        check_token(flow_id, "flow id")
        async with Session(resolve_target(g), g.timeout) as s:
            try:
                await s.query(subjects.CORE_CATALOG_FLOWS_GET, {"id": flow_id})
            except CliError as exc:
                if exc.code is ExitCode.NOT_FOUND:
                    exc.message, exc.hint = f"no flow {flow_id!r}", "`nexus flows ls`"
                raise
            await s.publish_guarded(delete_flow(s.bus, flow_id, deleted_by=whoami()))
            if wait:
                await _gone(s, flow_id)
        if output is Output.JSON:
            print_json({"deleted": flow_id})
        else:
            console.print(f"flow/{flow_id} deleted", markup=False)

    run(output, body)


async def _gone(s: Session, flow_id: str) -> None:
    """Wait until core no longer serves the flow (exit 5 after APPLY_WAIT_SECONDS)."""
    deadline = time.monotonic() + APPLY_WAIT_SECONDS
    while True:
        try:
            await s.query(subjects.CORE_CATALOG_FLOWS_GET, {"id": flow_id})
        except CliError as exc:
            if exc.code is ExitCode.NOT_FOUND:
                return
            raise
        if time.monotonic() > deadline:
            raise CliError(
                f"flow/{flow_id} deletion was published but core's catalog still shows it",
                hint="core may be behind or down: `nexus doctor`",
                code=ExitCode.TIMEOUT,
            )
        await asyncio.sleep(0.05)
