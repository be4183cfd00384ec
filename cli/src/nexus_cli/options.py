"""Options every command shares: the context, the NATS URL, the output format, the timeout,
and the one place a command's async body is run and its errors turned into exit codes."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Annotated, TypeVar

import typer

from nexus_cli.errors import (
    CliError,
    ExitCode,
    bus_failure,
    exit_with_error,
    fail,
    nats_failure,
)

T = TypeVar("T")

# Seconds a query waits for its reply before the command exits 5.
DEFAULT_TIMEOUT = 5.0


class Output(StrEnum):
    TABLE = "table"
    JSON = "json"


OutputOpt = Annotated[
    Output,
    typer.Option("--output", "-o", help="table for people, json for scripts.", show_default=True),
]
# The RUN argument of every command on one run.
RunArg = Annotated[str, typer.Argument(metavar="RUN", help="Run id.")]
ContextOpt = Annotated[
    str | None,
    typer.Option("--context", help="Context to use (default: the current one).", envvar=None),
]
NatsUrlOpt = Annotated[
    str | None,
    typer.Option("--nats-url", help="NATS URL; overrides the context (env NEXUS_NATS_URL)."),
]
TimeoutOpt = Annotated[
    float,
    typer.Option("--timeout", min=0.1, help="Seconds to wait for a reply.", show_default=True),
]


@dataclass
class Globals:
    """What the root callback collected; commands read it from ``ctx.obj``."""

    context: str | None = None
    nats_url: str | None = None
    timeout: float = DEFAULT_TIMEOUT


def globals_of(ctx: typer.Context) -> Globals:
    root = ctx.find_root()
    obj = root.obj
    if not isinstance(obj, Globals):
        obj = Globals(nats_url=os.environ.get("NEXUS_NATS_URL") or None)
        root.obj = obj
    return obj


def run(output: Output, body: Callable[[], Awaitable[T]]) -> T:
    """Run a command's async body; every `CliError` leaves through `exit_with_error`."""
    try:
        return asyncio.run(_guarded(body))
    except CliError as exc:
        fail(exc, as_json=output is Output.JSON)
    except KeyboardInterrupt:
        exit_with_error("interrupted", None, ExitCode.INTERRUPTED, as_json=output is Output.JSON)


async def _guarded(body: Callable[[], Awaitable[T]]) -> T:
    # A bus error no command translated itself (a replay or a JetStream API call while the
    # cluster has no quorum) still leaves as one line and exit 4, never a traceback.
    import nats.errors
    from nexus_events.errors import BusError

    try:
        return await body()
    except BusError as exc:
        raise bus_failure(exc, "NATS JetStream failed") from exc
    except nats.errors.Error as exc:
        raise nats_failure(exc) from exc


def guard(output: Output, body: Callable[[], T]) -> T:
    """Like `run` for a synchronous body."""
    try:
        return body()
    except CliError as exc:
        fail(exc, as_json=output is Output.JSON)
