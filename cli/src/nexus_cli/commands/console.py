"""`nexus console token`: a bearer token for the Nexus console (docs/console.md)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer

from nexus_cli.errors import CliError, ExitCode
from nexus_cli.options import Output, guard
from nexus_cli.output import console

app = typer.Typer(help="The web console: `token` (a sign-in token).", no_args_is_help=True)


def _append(path: Path, entry: dict[str, str]) -> None:
    """Add `entry` to the tokens file at `path` (created 0600 if missing); a duplicate name or
    a file that is not a tokens file is a one-line error (exit 2), the file left as it was."""
    import yaml
    from nexus_events.runtime.bearer_tokens import TokenEntry, TokensFileError, load_entries

    entries: list[TokenEntry] = []
    if path.exists():
        try:
            entries = load_entries(path, TokenEntry)
        except TokensFileError as exc:
            raise CliError(str(exc), code=ExitCode.INVALID) from None
    if any(e.name == entry["name"] for e in entries):
        raise CliError(
            f"tokens file {path} already has a token named {entry['name']!r}",
            hint="choose another --as, or remove the old entry first",
            code=ExitCode.INVALID,
        )
    rows = [e.model_dump(mode="json") for e in entries] + [entry]
    text = yaml.safe_dump({"tokens": rows}, sort_keys=False)
    # Written beside it and renamed: the console re-reads the file when it changes, and must
    # never see it half-written.
    scratch = path.with_name(f".{path.name}.tmp")
    fd = os.open(scratch, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(text)
    os.replace(scratch, path)


@app.command("token")
def token_cmd(
    name: Annotated[
        str, typer.Option("--as", help="Who holds it: shown in the console and as console:NAME.")
    ],
    scope: Annotated[str, typer.Option(help="read (see) or operate (also act).")] = "read",
    file: Annotated[
        Path | None,
        typer.Option(
            "--file",
            envvar="NEXUS_CONSOLE_TOKENS_FILE",
            help="Add the entry to this tokens file (created with mode 0600).",
        ),
    ] = None,
) -> None:
    """Print a new random console token (shown once: give it to its holder) and its
    tokens-file entry, which holds only the token's sha256; with --file, add the entry."""
    from nexus_events.runtime.bearer_tokens import CONSOLE_TOKEN_PREFIX, TokenEntry, new_token
    from pydantic import ValidationError

    def body() -> None:
        if scope not in ("read", "operate"):
            raise CliError(f"--scope must be read or operate, not {scope!r}", code=ExitCode.INVALID)
        token, sha256 = new_token(CONSOLE_TOKEN_PREFIX)
        entry = {"name": name, "sha256": sha256, "scope": scope}
        try:
            TokenEntry.model_validate(entry)
        except ValidationError:
            raise CliError(
                f"invalid --as {name!r}: 1-64 of letters, digits and _ . @ -",
                code=ExitCode.INVALID,
            ) from None
        console.print(f"token: {token}", markup=False, highlight=False)
        if file is None:
            import yaml

            console.print("add to the console's tokens file:", markup=False)
            text = yaml.safe_dump({"tokens": [entry]}, sort_keys=False).rstrip()
            console.print(text, markup=False, highlight=False)
            return
        _append(file, entry)
        console.print(f"added {name} ({scope}) to {file}", markup=False, highlight=False)

    guard(Output.TABLE, body)
