"""`nexus context ls|use|set|rm`: named targets, like kubectl contexts."""

from __future__ import annotations

from typing import Annotated

import typer

from nexus_cli.contexts import (
    DEFAULT_CONTEXT,
    ContextSpec,
    context_file_path,
    load_contexts,
    save_contexts,
)
from nexus_cli.errors import CliError, ExitCode
from nexus_cli.options import Output, OutputOpt, guard
from nexus_cli.output import emit, message

app = typer.Typer(help="Contexts: where the CLI talks to (the dev stack by default).")
NameArg = Annotated[str, typer.Argument(metavar="NAME", help="Context name.")]


@app.command("ls")
def ls_cmd(output: OutputOpt = Output.TABLE) -> None:
    """Known contexts; the current one is marked."""

    def body() -> None:
        contexts = load_contexts()
        data = {
            "file": str(context_file_path()),
            "current": contexts.current,
            "contexts": {
                n: s.model_dump(exclude_defaults=True) for n, s in contexts.contexts.items()
            },
        }
        emit(
            output,
            data,
            ("", "NAME", "NATS", "DATABASE", "DEV"),
            [
                (
                    "*" if n == contexts.current else "",
                    n,
                    s.nats_url or ("(dev stack)" if s.dev else ""),
                    s.database_url or "",
                    "yes" if s.dev else "",
                )
                for n, s in contexts.contexts.items()
            ],
        )

    guard(output, body)


@app.command("use")
def use_cmd(name: NameArg, output: OutputOpt = Output.TABLE) -> None:
    """Make NAME the current context."""

    def body() -> None:
        contexts = load_contexts()
        if name not in contexts.contexts:
            raise CliError(
                f"no context {name!r}", hint="`nexus context ls`", code=ExitCode.NOT_FOUND
            )
        contexts.current = name
        path = save_contexts(contexts)
        message(output, f"current context: {name} ({path})", {"current": name})

    guard(output, body)


@app.command("set")
def set_cmd(
    name: NameArg,
    nats_url: Annotated[str | None, typer.Option(help="NATS URL(s).")] = None,
    database_url: Annotated[str | None, typer.Option(help="PostgreSQL DSN.")] = None,
    dev: Annotated[bool, typer.Option(help="A dev stack context.")] = False,
    dev_home: Annotated[str | None, typer.Option(help="Its stack directory.")] = None,
    output: OutputOpt = Output.TABLE,
) -> None:
    """Create or replace context NAME."""

    def body() -> None:
        if not (nats_url or dev or dev_home):
            raise CliError("a context needs --nats-url or --dev", code=ExitCode.INVALID)
        contexts = load_contexts()
        contexts.contexts[name] = ContextSpec(
            dev=dev or bool(dev_home),
            dev_home=dev_home,
            nats_url=nats_url,
            database_url=database_url,
        )
        path = save_contexts(contexts)
        message(output, f"context {name} saved ({path})", {"name": name})

    guard(output, body)


@app.command("rm")
def rm_cmd(name: NameArg, output: OutputOpt = Output.TABLE) -> None:
    """Remove context NAME (the default dev context always exists)."""

    def body() -> None:
        contexts = load_contexts()
        if name not in contexts.contexts or name == DEFAULT_CONTEXT:
            raise CliError(f"cannot remove context {name!r}", code=ExitCode.NOT_FOUND)
        del contexts.contexts[name]
        if contexts.current == name:
            contexts.current = DEFAULT_CONTEXT
        save_contexts(contexts)
        message(output, f"context {name} removed", {"removed": name})

    guard(output, body)
