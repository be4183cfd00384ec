"""The root command group that imports a command's module only when that command is used."""

from __future__ import annotations

import importlib
from collections.abc import Iterator, MutableMapping, Sequence
from dataclasses import dataclass
from typing import Any

import typer
import typer.main
from typer import _click
from typer.core import TyperCommand, TyperGroup

COMMANDS_PACKAGE = "nexus_cli.commands"


@dataclass(frozen=True)
class LazyCommand:
    """One command of `nexus`: where it is defined, and its line in `nexus --help`.

    ``attribute`` is the module's Typer sub-app for a command group (``app``), or
    ``register`` (or ``register_<what>``) for a module function that adds the command to the
    app it is given.
    ``summary`` is the first paragraph of the command's help, as `nexus --help` shows it
    (a unit test checks it against the command itself).
    """

    name: str
    module: str
    attribute: str
    summary: str

    @property
    def module_path(self) -> str:
        return f"{COMMANDS_PACKAGE}.{self.module}"


def load_command(entry: LazyCommand) -> _click.Command:
    """Import the entry's module and build its click command, as the eager root built it."""
    module = importlib.import_module(entry.module_path)
    scratch = typer.Typer()
    if entry.attribute.startswith("register"):
        getattr(module, entry.attribute)(scratch)
    else:
        scratch.add_typer(getattr(module, entry.attribute), name=entry.name)
    group = typer.main.get_group(scratch)
    command = group.commands.get(entry.name)
    if command is None:
        raise LookupError(f"{entry.module_path} does not define the command {entry.name!r}")
    return command


class _LazyCommands(MutableMapping[str, _click.Command]):
    """The group's commands: names known up front, each built on first lookup."""

    def __init__(self, entries: Sequence[LazyCommand]) -> None:
        self._entries = {entry.name: entry for entry in entries}
        self._loaded: dict[str, _click.Command] = {}

    def __getitem__(self, name: str) -> _click.Command:
        if name not in self._loaded:
            if name not in self._entries:
                raise KeyError(name)
            self._loaded[name] = load_command(self._entries[name])
        return self._loaded[name]

    def __setitem__(self, name: str, command: _click.Command) -> None:
        self._loaded[name] = command

    def __delitem__(self, name: str) -> None:
        self._entries.pop(name, None)
        del self._loaded[name]

    def __iter__(self) -> Iterator[str]:
        yield from self._entries
        yield from (name for name in self._loaded if name not in self._entries)

    def __len__(self) -> int:
        return len(set(self._entries) | set(self._loaded))


class LazyGroup(TyperGroup):
    """A TyperGroup over a table of LazyCommand: its help lists them without importing them.

    Subclass it with ``entries`` set; Typer instantiates it as the root's ``cls``.
    """

    entries: Sequence[LazyCommand] = ()

    def __init__(self, **attrs: Any) -> None:
        super().__init__(**attrs)
        registered = dict(self.commands)  # commands Typer registered directly, if any
        self.commands = _LazyCommands(self.entries)
        self.commands.update(registered)
        self._summaries = {entry.name: entry.summary for entry in self.entries}
        self._listing = False

    def list_commands(self, ctx: _click.Context) -> list[str]:
        # TyperGroup's own reads every command (``commands.items()``): the names are enough.
        return list(self.commands)

    def get_command(self, ctx: _click.Context, cmd_name: str) -> _click.Command | None:
        if self._listing and cmd_name in self._summaries:
            # The help's list needs a name and a line: a stand-in keeps the module unimported.
            return TyperCommand(name=cmd_name, help=self._summaries[cmd_name])
        return self.commands.get(cmd_name)

    def format_help(self, ctx: _click.Context, formatter: _click.HelpFormatter) -> None:
        self._listing = True
        try:
            super().format_help(ctx, formatter)
        finally:
            self._listing = False
