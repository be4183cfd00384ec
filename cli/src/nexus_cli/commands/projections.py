"""`nexus projections status|rebuild`: read models against their streams.

Each projection belongs to the service that applies it, and only that service touches its
tables: core's (agent_runs, board) are asked of core (``nexus.core.v1.projections.status`` /
``.rebuild``), memory's of the memory service (``nexus.memory.v1.rebuild``). A rebuild replays
into a fresh schema and swaps it in atomically, so the service keeps serving meanwhile.
"""

from __future__ import annotations

from typing import Annotated

import typer
from nexus_events.contract import subjects
from nexus_events.events.queries import ProjectionName

from nexus_cli.client import Session
from nexus_cli.commands import memory
from nexus_cli.errors import CliError, ExitCode
from nexus_cli.options import Output, OutputOpt, globals_of, run
from nexus_cli.output import emit, message
from nexus_cli.target import resolve_target

app = typer.Typer(
    help="Projections (agent_runs and board of core; memory): lag, and rebuild from the stream."
)
CORE_OWNED = tuple(p.value for p in ProjectionName)
# A rebuild replays whole streams: far longer than a query's usual wait.
REBUILD_WAIT = 600.0


@app.command("status")
def status_cmd(ctx: typer.Context, output: OutputOpt = Output.TABLE) -> None:
    """Per projection of core and source stream: checkpoint, stream end, how far behind."""
    g = globals_of(ctx)

    async def body() -> None:
        target = resolve_target(g)
        async with Session(target, g.timeout) as s:
            reply = await s.query(subjects.CORE_PROJECTIONS_STATUS)
        rows = reply.get("projections", [])
        emit(
            output,
            {"projections": rows},
            ("PROJECTION", "STREAM", "CHECKPOINT", "STREAM LAST", "BEHIND"),
            [
                (r["projection"], r["stream"], r["checkpoint"], r["stream_last_seq"], r["behind"])
                for r in rows
            ],
        )

    run(output, body)


@app.command("rebuild")
def rebuild_cmd(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(metavar="PROJECTION", help="agent_runs, board or memory.")],
    output: OutputOpt = Output.TABLE,
) -> None:
    """Ask the owning service to replay the projection into a fresh schema and swap it in."""
    g = globals_of(ctx)

    async def body() -> None:
        if name not in (*CORE_OWNED, "memory"):
            raise CliError(
                f"unknown projection {name!r}",
                hint="one of: " + ", ".join([*CORE_OWNED, "memory"]),
                code=ExitCode.INVALID,
            )
        target = resolve_target(g)
        if name == "memory":
            async with Session(target, g.timeout) as s:
                reply = await memory.rebuild(s)
            message(
                output,
                f"rebuilt memory from {reply.get('applied')} events in"
                f" {float(reply.get('seconds') or 0):.1f}s"
                f" ({reply.get('embedder')}, {reply.get('dimension')}-d vectors)",
                {"projection": "memory", "events": reply.get("applied"), **reply},
            )
            return
        async with Session(target, g.timeout) as s:
            reply = await s.query(
                subjects.CORE_PROJECTIONS_REBUILD,
                {"projection": name},
                wait=max(g.timeout, REBUILD_WAIT),
            )
        applied = reply.get("applied")
        message(
            output,
            f"rebuilt {name} from {applied} events in {float(reply.get('seconds') or 0):.1f}s",
            {"projection": name, "events": applied, **reply},
        )

    run(output, body)
