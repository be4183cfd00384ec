"""Run the `nexus` CLI in this process from an async test, against the test's NATS."""

from __future__ import annotations

import asyncio
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


async def nexus(nats_url: str, tmp_path: Path, *args: str, columns: int = 200) -> Result:
    """`nexus ARGS...`; the CLI runs its own event loop, so a thread keeps the test's loop
    free to serve the services the command talks to."""
    env = cli_env(nats_url, tmp_path, columns=columns)
    return await asyncio.to_thread(
        CliRunner().invoke, app, list(args), env=env, catch_exceptions=False
    )
