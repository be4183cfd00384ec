"""The one way a command fails: a one-line message, a hint, and a documented exit code.

Exit codes (docs/cli.md):

==== =====================================================================
0    success
1    the run ended badly (failed, cancelled, timed_out, lost)
2    usage error or invalid input (bad flag, malformed document, bad id, a blocked secret)
3    not found (run, agent, skill, dead letter, context, memory)
4    unavailable (NATS, PostgreSQL, a service, or the dev stack is down)
5    timed out waiting
6    refused: the approver policy does not let you decide this approval (docs/approvals.md)
130  interrupted (Ctrl-C)
==== =====================================================================
"""

from __future__ import annotations

import json
import sys
from enum import IntEnum
from typing import TYPE_CHECKING, NoReturn

import typer
from rich.console import Console
from rich.markup import escape

if TYPE_CHECKING:
    import nats.errors
    from nexus_events.errors import BusError


class ExitCode(IntEnum):
    OK = 0
    RUN_FAILED = 1
    INVALID = 2
    NOT_FOUND = 3
    UNAVAILABLE = 4
    TIMEOUT = 5
    REFUSED = 6
    INTERRUPTED = 130


class CliError(Exception):
    """Raised anywhere below a command; the command's runner turns it into `exit_with_error`."""

    def __init__(
        self,
        message: str,
        *,
        hint: str | None = None,
        code: ExitCode = ExitCode.INVALID,
        details: list[str] | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint
        self.code = code
        self.details = details or []


def _stderr() -> Console:
    return Console(stderr=True, highlight=False, soft_wrap=True)


def exit_with_error(
    message: str,
    hint: str | None = None,
    code: ExitCode = ExitCode.INVALID,
    *,
    details: list[str] | None = None,
    as_json: bool = False,
) -> NoReturn:
    """Print ``error: <message>`` (plus indented details and a hint) on stderr and exit `code`.

    With `as_json` the same facts go to stderr as one JSON object, for scripts.
    """
    if as_json:
        body = {"error": {"code": int(code), "message": message, "hint": hint, "details": details}}
        sys.stderr.write(json.dumps(body) + "\n")
    else:
        console = _stderr()
        # The message may quote what a person or a server said ("no skill 'x@[/]'"): as markup
        # it would be mangled or make rich raise instead of printing the error.
        console.print(f"[bold red]error:[/] {escape(message)}", markup=True)
        for line in details or []:
            console.print(f"  {line}", markup=False)
        if hint:
            console.print(f"[dim]hint:[/] {hint}", markup=True)
    raise typer.Exit(int(code))


def fail(error: CliError, *, as_json: bool = False) -> NoReturn:
    exit_with_error(error.message, error.hint, error.code, details=error.details, as_json=as_json)


def bus_failure(exc: BusError, doing: str) -> CliError:
    """The one-line error (exit 4) for a bus failure while `doing` something.

    Connected but JetStream could not store or answer (no quorum, no meta leader, an
    election): one line naming the cause, no hint (docs/deploy.md says what to do). A
    cluster without quorum is named as such, on its own.
    """
    # Imported here: every command imports this module, not every one talks to the bus.
    from nexus_events.errors import JetStreamUnavailable, NoQuorum, PublishFailed

    message = " ".join(str(exc).split())
    if isinstance(exc, NoQuorum):
        return CliError(message, code=ExitCode.UNAVAILABLE)
    named = isinstance(exc, (JetStreamUnavailable, PublishFailed))
    hint = None if named else "check `nexus doctor`"
    return CliError(f"{doing}: {message}", hint=hint, code=ExitCode.UNAVAILABLE)


def nats_failure(exc: nats.errors.Error) -> CliError:
    """The one-line error (exit 4) for a NATS client error no command translated itself."""
    message = " ".join(str(exc).split()) or type(exc).__name__
    return CliError(
        f"NATS failed: {type(exc).__name__}: {message}",
        hint="check `nexus doctor`",
        code=ExitCode.UNAVAILABLE,
    )
