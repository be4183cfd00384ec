"""`nexus projections status|rebuild`: read models against their streams.

Core's (agent_runs, board) are read and rebuilt here through PostgreSQL (the context's
database, or the dev stack's): checkpoints live beside the rows. A rebuild replays into a fresh
schema and swaps it in atomically, so core can keep running meanwhile. Memory's tables belong
to the memory service: `rebuild memory` asks it (``nexus.memory.v1.rebuild``) to do the same.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Annotated, Any

import asyncpg
import typer
from nexus_core.board_projection import BoardProjection
from nexus_core.runs_projection import AgentRunsProjection
from nexus_events.projection import Projection, projection_status, rebuild

from nexus_cli.client import Session
from nexus_cli.commands import memory
from nexus_cli.errors import CliError, ExitCode
from nexus_cli.options import Output, OutputOpt, globals_of, run
from nexus_cli.output import emit, message
from nexus_cli.target import Target, resolve_target

app = typer.Typer(
    help="Projections (agent_runs, board; memory via its service): lag, and rebuild from the"
    " stream."
)
# Projections whose owning service rebuilds them on request: the CLI never touches their tables.
SERVICE_OWNED = ("memory",)


def projections() -> dict[str, Projection]:
    return {"agent_runs": AgentRunsProjection(), "board": BoardProjection()}


@asynccontextmanager
async def pg_pool(target: Target) -> AsyncIterator[asyncpg.Pool[Any]]:
    if not target.database_url:
        raise CliError(
            f"context {target.context!r} names no database",
            hint="`nexus context set NAME --database-url DSN` or NEXUS_DATABASE_URL",
            code=ExitCode.INVALID,
        )
    try:
        pool = await asyncpg.create_pool(target.database_url, min_size=1, max_size=2, timeout=5)
    except (OSError, asyncpg.PostgresError) as exc:
        raise CliError(f"cannot reach PostgreSQL: {exc}", code=ExitCode.UNAVAILABLE) from exc
    try:
        yield pool
    finally:
        await pool.close()


@app.command("status")
def status_cmd(ctx: typer.Context, output: OutputOpt = Output.TABLE) -> None:
    """Per projection and source stream: checkpoint, stream end, how far behind."""
    g = globals_of(ctx)

    async def body() -> None:
        target = resolve_target(g)
        rows = []
        async with Session(target, g.timeout) as s, pg_pool(target) as pool:
            for name, projection in projections().items():
                for stream, pos in (await projection_status(s.bus, pool, projection)).items():
                    rows.append({"projection": name, "stream": stream, **pos})
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
    """Replay the projection from its streams into a fresh schema and swap it in."""
    g = globals_of(ctx)

    async def body() -> None:
        known = projections()
        if name not in known and name not in SERVICE_OWNED:
            raise CliError(
                f"unknown projection {name!r}",
                hint="one of: " + ", ".join([*known, *SERVICE_OWNED]),
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
        async with Session(target, g.timeout) as s, pg_pool(target) as pool:
            applied = await rebuild(s.bus, pool, known[name])
        message(
            output, f"rebuilt {name} from {applied} events", {"projection": name, "events": applied}
        )

    run(output, body)
