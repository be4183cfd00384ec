"""The CLI's start imports no heavy module, and its lazy command table matches the commands."""

from __future__ import annotations

import inspect
import json
import pkgutil
import subprocess
import sys

import pytest
import typer
import typer.core
import typer.main
from typer.testing import CliRunner

import nexus_cli.commands
from nexus_cli.lazy_group import load_command
from nexus_cli.main import COMMANDS, app

# Modules the CLI's start must not load: the transport, the contract's event models, the
# databases and model clients, and the heavy libraries only some commands use.
HEAVY = (
    "nats",
    "aiohttp",
    "mcp",
    "openai",
    "asyncpg",
    "yaml",
    "croniter",
    "nexus_events.events",
    "nexus_events.events.runs",
    "nexus_events.contract.codec",
    "nexus_events.transport.bus",
    "nexus_cli.commands.runs",
    "nexus_cli.client",
)  # not rich.table: Typer's own help draws its panels with it


def _modules_after(code: str) -> set[str]:
    """The modules a fresh interpreter holds after running `code`."""
    probe = f"{code}\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))"
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60
    )
    return set(json.loads(done.stdout.splitlines()[-1]))


def _modules_after_help(*commands: list[str]) -> set[str]:
    """The modules loaded by printing each command's --help in one fresh interpreter."""
    return _modules_after(
        "import contextlib, io\n"
        "from nexus_cli.main import app\n"
        f"for args in {commands!r}:\n"
        "    shown = io.StringIO()\n"
        "    with contextlib.redirect_stdout(shown):\n"
        "        try:\n"
        "            app(args, prog_name='nexus')\n"
        "        except SystemExit as exit:\n"
        "            assert exit.code == 0, exit.code\n"
        "    assert 'Usage: nexus' in shown.getvalue(), shown.getvalue()\n"
    )


def test_the_root_help_loads_no_heavy_module() -> None:
    loaded = _modules_after_help(["--help"])
    assert "typer" in loaded
    assert sorted(name for name in HEAVY if name in loaded) == []


def test_a_commands_help_loads_its_module_and_no_transport() -> None:
    loaded = _modules_after_help(["--help"], ["console", "--help"])
    assert "nexus_cli.commands.console" in loaded  # the probe did build the command's help
    assert sorted(name for name in HEAVY if name in loaded) == []


def test_the_event_models_import_without_the_transport() -> None:
    loaded = _modules_after("import nexus_events.events")
    assert "nexus_events.events.runs" in loaded
    assert sorted(name for name in ("nats", "aiohttp", "asyncpg") if name in loaded) == []


def test_the_contracts_common_names_still_import_from_its_root() -> None:
    loaded = _modules_after(
        "from nexus_events import Bus, Envelope, Event, StreamSettings, decode, ensure_streams"
    )
    assert "nats" in loaded  # the lazy names resolve to the real transport


def test_every_command_module_is_in_the_table() -> None:
    modules = {info.name for info in pkgutil.iter_modules(nexus_cli.commands.__path__)}
    assert modules == {entry.module for entry in COMMANDS}


def test_each_entry_builds_its_command_with_the_help_line_it_lists() -> None:
    for entry in COMMANDS:
        command = load_command(entry)
        first_paragraph = inspect.cleandoc(command.short_help or command.help or "")
        assert first_paragraph.split("\n\n")[0] == entry.summary, entry.name
        assert not command.hidden, entry.name


def _help_of(group: typer.core.TyperGroup, capsys: pytest.CaptureFixture[str]) -> str:
    group.main(["--help"], prog_name="nexus", standalone_mode=False)
    return capsys.readouterr().out


def test_the_lazy_root_lists_what_an_eager_root_lists(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "120")
    lazy = typer.main.get_group(app)
    eager = typer.core.TyperGroup(  # the root as it was: every command built up front
        name=lazy.name,
        commands={entry.name: load_command(entry) for entry in COMMANDS},
        params=lazy.params,
        help=lazy.help,
        context_settings=lazy.context_settings,
        rich_markup_mode=lazy.rich_markup_mode,
    )
    eager_help = _help_of(eager, capsys)
    lazy_help = _help_of(lazy, capsys)
    assert "ps " in eager_help
    assert lazy_help == eager_help


def test_a_command_runs_through_the_lazy_root() -> None:
    result = CliRunner().invoke(app, ["context", "--help"])
    assert result.exit_code == 0, result.output
    assert "Contexts" in result.output


def test_a_mistyped_command_is_still_suggested() -> None:
    result = CliRunner().invoke(app, ["contxt"])
    assert result.exit_code != 0
    assert "context" in result.output
