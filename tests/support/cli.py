"""Run the `nexus` CLI in this process (typer's CliRunner): the one helper of the CLI tests,
the services' tests that drive the CLI, and the dev stack's in-process `Stack.nexus`."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from pathlib import Path

from nexus_cli.main import app
from typer.testing import CliRunner, Result


def cli_env(nats_url: str, tmp_path: Path, *, columns: int = 200) -> dict[str, str]:
    """The CLI's environment: this NATS, no saved context, a wide terminal for tables."""
    return {
        "NEXUS_DEV_HOME": str(tmp_path / ".nexus"),
        "NEXUS_CONTEXT_FILE": str(tmp_path / "contexts.yaml"),
        "NEXUS_NATS_URL": nats_url,
        "NEXUS_CONTEXT": "",
        "COLUMNS": str(columns),
    }


def invoke(env: Mapping[str, str], *args: str) -> Result:
    """`nexus ARGS...` with `env` over this process's environment, exceptions not caught
    (a crash fails the test with its traceback instead of becoming an exit code)."""
    return CliRunner().invoke(app, list(args), env=dict(env), catch_exceptions=False)


async def nexus(nats_url: str, tmp_path: Path, *args: str, columns: int = 200) -> Result:
    """`nexus ARGS...` against `nats_url` from an async test; the CLI runs its own event
    loop, so a thread keeps the test's loop free to serve the services the command talks to."""
    env = cli_env(nats_url, tmp_path, columns=columns)
    return await asyncio.to_thread(invoke, env, *args)
