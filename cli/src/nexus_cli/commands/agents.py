"""`nexus agents apply|ls|show|history`: agent definitions in the catalog."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Annotated, Any

import typer
import yaml
from nexus_events.contract import subjects
from nexus_events.contract.streams import CATALOG
from nexus_events.events.queries import CanaryView
from nexus_events.transport.catalog_commands import apply_agent

from nexus_cli.apply_sources import PathsArg, apply_paths, file_option
from nexus_cli.client import Session, check_token, whoami
from nexus_cli.documents import load_agents
from nexus_cli.errors import CliError, ExitCode
from nexus_cli.options import Output, OutputOpt, globals_of, run
from nexus_cli.output import console, emit, print_json
from nexus_cli.target import resolve_target

app = typer.Typer(help="Agent definitions: apply from YAML, list, show, history.")

FileOpt = Annotated[list[Path] | None, file_option("A YAML/JSON file or a directory of them")]
WaitOpt = Annotated[
    bool, typer.Option("--wait/--no-wait", help="Wait until core's catalog shows the change.")
]
# Seconds `apply --wait` gives core's catalog projection to catch up.
APPLY_WAIT_SECONDS = 15.0


async def wait_visible(
    session: Session, subject: str, body: dict[str, Any], check: Any, what: str
) -> None:
    """Poll a catalog query until `check(reply)`; exit 5 after APPLY_WAIT_SECONDS."""
    deadline = time.monotonic() + APPLY_WAIT_SECONDS
    while True:
        try:
            if check(await session.query(subject, body)):
                return
        except CliError as exc:
            if exc.code is not ExitCode.NOT_FOUND:
                raise
        if time.monotonic() > deadline:
            raise CliError(
                f"{what} was published but core's catalog does not show it yet",
                hint="core may be behind or down: `nexus doctor`",
                code=ExitCode.TIMEOUT,
            )
        await asyncio.sleep(0.05)


@app.command("apply")
def apply_cmd(
    ctx: typer.Context,
    file: FileOpt = None,
    paths: PathsArg = None,
    wait: WaitOpt = True,
    output: OutputOpt = Output.TABLE,
) -> None:
    """Validate every document first (errors field by field, exit 2, nothing sent), then apply."""
    g = globals_of(ctx)

    async def body() -> None:
        loaded = load_agents(apply_paths(file, paths))
        async with Session(resolve_target(g), g.timeout) as s:
            applied = []
            for item in loaded:
                definition = await s.publish_guarded(
                    apply_agent(s.bus, item.document, applied_by=whoami())
                )
                applied.append({"id": definition.id, "file": str(item.path)})
            if wait:
                for item in loaded:
                    want = item.document.model_dump(mode="json")
                    await wait_visible(
                        s,
                        subjects.CORE_CATALOG_AGENTS_GET,
                        {"id": item.document.id},
                        lambda r, want=want: r.get("definition") == want,
                        f"agent/{item.document.id}",
                    )
        if output is Output.JSON:
            print_json({"applied": applied})
        else:
            for a in applied:
                console.print(f"agent/{a['id']} applied ({a['file']})", markup=False)

    run(output, body)


@app.command("ls")
def ls_cmd(ctx: typer.Context, output: OutputOpt = Output.TABLE) -> None:
    """List agents with their role, model and catalog revision."""
    g = globals_of(ctx)

    async def body() -> None:
        async with Session(resolve_target(g), g.timeout) as s:
            data = await s.query(subjects.CORE_CATALOG_AGENTS_LIST)
        rows = [
            (
                a["definition"]["id"],
                a["definition"]["role"],
                a["definition"]["model"]["name"],
                a["revision"],
                len(a["definition"].get("tools") or []),
                a["definition"].get("description", ""),
            )
            for a in data.get("agents", [])
        ]
        emit(
            output,
            data,
            ("ID", "ROLE", "MODEL", "REV", "TOOLS", "DESCRIPTION"),
            rows,
            empty="no agents; apply some with `nexus agents apply -f DIR`",
        )

    run(output, body)


@app.command("show")
def show_cmd(
    ctx: typer.Context,
    agent_id: Annotated[str, typer.Argument(metavar="AGENT", help="Agent id.")],
    output: OutputOpt = Output.TABLE,
) -> None:
    """The agent's current definition, as YAML (or JSON with -o json)."""
    g = globals_of(ctx)

    async def body() -> None:
        check_token(agent_id, "agent id")
        async with Session(resolve_target(g), g.timeout) as s:
            try:
                data = await s.query(subjects.CORE_CATALOG_AGENTS_GET, {"id": agent_id})
            except CliError as exc:
                if exc.code is ExitCode.NOT_FOUND:
                    exc.message, exc.hint = f"no agent {agent_id!r}", "`nexus agents ls`"
                raise
        if output is Output.JSON:
            print_json(data)
            return
        console.print(f"# agent/{agent_id} revision {data['revision']}", markup=False)
        console.print(yaml.safe_dump(data["definition"], sort_keys=False).rstrip(), markup=False)
        for line in mcp_summary(data["definition"]):
            console.print(line, markup=False)
        for line in canary_lines(data.get("canary")):
            console.print(line, markup=False)

    run(output, body)


def canary_lines(canary: dict[str, Any] | None) -> list[str]:
    """Where the agent's canary stands (core's CanaryView), as comment lines after the YAML:
    each arm's finished runs and success rate, and the decision once taken."""
    if not canary:
        return []
    view = CanaryView.model_validate(canary)
    lines = [f"# canary: share {view.share:g}"]
    for name, arm in (("candidate", view.candidate), ("current", view.current)):
        lines.append(
            f"#   {name} revision {arm.revision}: {arm.succeeded}/{arm.runs} completed"
            f" ({arm.success_rate:.0%}), mean cost ${arm.mean_cost_usd:.4f},"
            f" mean turns {arm.mean_turns:.1f}"
        )
    if view.decision is not None:
        lines.append(f"#   decided: {view.decision} ({view.rule})")
    else:
        lines.append("#   running: no decision yet")
    return lines


def mcp_summary(definition: dict[str, Any]) -> list[str]:
    """Comment lines naming each MCP server of a definition: how it starts, which of its
    tools are granted and which run without approval (YAML comments, so the output stays
    a valid document to re-apply)."""
    servers = definition.get("mcp_servers") or []
    if not servers:
        return []
    lines = [f"# MCP servers: {len(servers)}"]
    for server in servers:
        if server.get("transport", "stdio") == "http":
            how = f"http {server.get('url')}"
        else:
            how = " ".join(["stdio", str(server.get("command")), *server.get("args", [])])
        secrets = sorted((server.get("env") or {}).values())
        lines.append(f"#   {server['name']}: {how}")
        lines.append(f"#     tools: {', '.join(server.get('tools') or [])}")
        auto = server.get("auto_approve") or []
        lines.append(
            f"#     auto-approved: {', '.join(auto) if auto else '(none; every call asks)'}"
        )
        if secrets:
            lines.append(f"#     secrets: {', '.join(secrets)}")
    return lines


@app.command("history")
def history_cmd(
    ctx: typer.Context,
    agent_id: Annotated[str, typer.Argument(metavar="AGENT", help="Agent id.")],
    output: OutputOpt = Output.TABLE,
) -> None:
    """Every apply/delete of the agent, from the NEXUS_CATALOG stream (the audit record)."""
    g = globals_of(ctx)

    async def body() -> None:
        check_token(agent_id, "agent id")
        entries = []
        async with Session(resolve_target(g), g.timeout) as s:
            async for d in s.bus.replay(
                CATALOG, filter_subject=subjects.catalog_events_filter("agent")
            ):
                if d.address.ids.get("id") != agent_id:
                    continue
                body = d.event.model_dump(mode="json")
                entries.append(
                    {
                        "seq": d.envelope.stream_seq,
                        "event": d.address.event,
                        "time": d.envelope.timestamp.isoformat() if d.envelope.timestamp else None,
                        "by": body.get("applied_by") or body.get("deleted_by"),
                        "model": (body.get("definition") or {}).get("model", {}).get("name"),
                        "body": body,
                    }
                )
        if not entries:
            raise CliError(f"no history for agent {agent_id!r}", code=ExitCode.NOT_FOUND)
        emit(
            output,
            {"agent_id": agent_id, "history": entries},
            ("SEQ", "EVENT", "TIME", "BY", "MODEL"),
            [(e["seq"], e["event"], e["time"], e["by"], e["model"]) for e in entries],
        )

    run(output, body)
