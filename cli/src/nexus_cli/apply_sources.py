"""Where every `apply` reads its documents: `-f/--file` (repeatable, as kubectl) or positional."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from nexus_cli.errors import CliError, ExitCode

# Positional paths stay as an alias of -f (`nexus flows apply DIR` was the flows form).
PathsArg = Annotated[
    list[Path] | None,
    typer.Argument(metavar="FILE|DIR", help="Same as -f (an alias).", show_default=False),
]


def file_option(what: str) -> Any:
    """The `-f/--file` option of an apply, saying what its files hold."""
    return typer.Option("--file", "-f", help=f"{what} (repeatable).", show_default=False)


def apply_paths(files: list[Path] | None, paths: list[Path] | None) -> list[Path]:
    """Every path named by -f and positionally, in that order; exit 2 if none."""
    named = [*(files or []), *(paths or [])]
    if not named:
        raise CliError(
            "name the documents to apply",
            hint="-f FILE|DIR (repeatable), e.g. `nexus agents apply -f agents/`",
            code=ExitCode.INVALID,
        )
    return named
