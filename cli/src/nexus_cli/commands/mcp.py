"""`nexus mcp serve|token`: Nexus as an MCP server for coding assistants and IDEs."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Literal

import typer

from nexus_cli.errors import CliError, ExitCode
from nexus_cli.options import Output, globals_of, guard, run
from nexus_cli.output import console
from nexus_cli.target import resolve_target

app = typer.Typer(
    help="Nexus as an MCP server: `serve` (stdio or HTTP), `token` (a bearer token for HTTP).",
    no_args_is_help=True,
)


@app.command("serve")
def serve_cmd(
    ctx: typer.Context,
    http: Annotated[
        bool, typer.Option("--http", help="Streamable HTTP at /mcp instead of stdio.")
    ] = False,
    host: Annotated[
        str, typer.Option(envvar="NEXUS_MCP_HOST", help="With --http: address to listen on.")
    ] = "127.0.0.1",
    port: Annotated[
        int, typer.Option(envvar="NEXUS_MCP_PORT", min=1, max=65535, help="With --http: port.")
    ] = 8765,
    tokens: Annotated[
        Path | None,
        typer.Option(
            "--tokens",
            envvar="NEXUS_MCP_TOKENS_FILE",
            help="With --http: the tokens file (YAML: name, sha256, scope, nats_user).",
        ),
    ] = None,
) -> None:
    """Serve MCP on stdio (what an IDE starts; acts as you, scope operate), or with --http
    on http://HOST:PORT/mcp where every request needs a bearer token from the tokens file."""
    g = globals_of(ctx)
    # Imported here: the SDK and uvicorn load only for this command.
    from nexus_cli.mcp.auth import Tokens, load_tokens
    from nexus_cli.mcp.serve import serve_http, serve_stdio

    async def body() -> None:
        target = resolve_target(g)
        if not http:
            await serve_stdio(target, g.timeout)
            return
        if tokens is None:
            raise CliError(
                "--http needs a tokens file",
                hint="`nexus mcp token --name NAME --scope read|operate`, then --tokens FILE"
                " (or NEXUS_MCP_TOKENS_FILE)",
                code=ExitCode.INVALID,
            )
        entries = load_tokens(tokens)
        await serve_http(target, g.timeout, host, port, Tokens(entries))

    run(Output.TABLE, body)


@app.command("token")
def token_cmd(
    name: Annotated[str, typer.Option(help="Who holds it: shown in logs, requested_by mcp:NAME.")],
    scope: Annotated[str, typer.Option(help="read or operate.")] = "read",
    agents: Annotated[
        str | None,
        typer.Option(
            help="Comma-separated agent ids or globs (planner,review*) the token sees and acts"
            " on; left out: every agent."
        ),
    ] = None,
) -> None:
    """Print a new random bearer token (give it to the client; it is shown once) and the
    tokens-file entry holding its sha256 and its agents (add it to the file the server reads)."""
    from pydantic import ValidationError

    from nexus_cli.mcp.auth import new_token

    def body() -> None:
        if scope not in ("read", "operate"):
            raise CliError(f"--scope must be read or operate, not {scope!r}")
        chosen: Literal["read", "operate"] = "operate" if scope == "operate" else "read"
        patterns = None if agents is None else [a.strip() for a in agents.split(",") if a.strip()]
        try:
            token, entry = new_token(name, chosen, patterns)
        except ValidationError as exc:
            if any(e["loc"][:1] == ("agents",) for e in exc.errors()):
                raise CliError(
                    f"invalid --agents {agents!r}: comma-separated agent ids or globs"
                    " (letters, digits, _ - * ?)"
                ) from None
            raise CliError(
                f"invalid --name {name!r}: 1-64 of letters, digits and _ . @ -"
            ) from None
        console.print(f"token: {token}", markup=False, highlight=False)
        console.print("add to the tokens file:", markup=False)
        console.print(entry.rstrip(), markup=False, highlight=False)
        if os.environ.get("NEXUS_MCP_TOKENS_FILE"):
            console.print(f"(the server reads {os.environ['NEXUS_MCP_TOKENS_FILE']})", markup=False)

    guard(Output.TABLE, body)
