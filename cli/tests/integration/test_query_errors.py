"""The CLI turns core's query errors into one line and a documented exit code, whatever the
error quotes: run against a real core on a real nats-server and PostgreSQL."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import asyncpg
import pytest
from nexus_core.app import CoreApp
from nexus_core.config import CoreSettings
from nexus_events.bus import Bus
from typer.testing import CliRunner, Result

from nexus_cli.errors import ExitCode
from nexus_cli.main import app


@pytest.fixture
async def core(bus: Bus, pg_pool: asyncpg.Pool[Any]) -> AsyncIterator[CoreApp]:
    settings = CoreSettings(health_port=None, memory_enabled=False, fetch_timeout=0.2)
    core = CoreApp(settings, bus=bus, pool=pg_pool)
    await core.start()
    try:
        yield core
    finally:
        await core.stop()


async def nexus(nats_url: str, tmp_path: Path, *args: str) -> Result:
    env = {
        "NEXUS_DEV_HOME": str(tmp_path / ".nexus"),
        "NEXUS_CONTEXT_FILE": str(tmp_path / "contexts.yaml"),
        "NEXUS_NATS_URL": nats_url,
        "NEXUS_CONTEXT": "",
        "COLUMNS": "200",
    }
    # The CLI runs its own event loop: a thread keeps this one free to serve core.
    return await asyncio.to_thread(
        CliRunner().invoke, app, list(args), env=env, catch_exceptions=False
    )


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (("ps", "--status", "bogus"), ExitCode.INVALID, "invalid request: status:"),
        (("ps", "--all", "--agent", "a\x00b"), ExitCode.INVALID, "agent_id: must not contain NUL"),
        (("skills", "show", "python", "--version", "1\x00"), ExitCode.INVALID, "version:"),
        (("skills", "show", "python", "--version", "[/]"), ExitCode.NOT_FOUND, "python@[/]"),
    ],
    ids=["unknown-status", "nul-agent", "nul-version", "markup-in-message"],
)
async def test_query_errors_print_one_line_and_exit_non_zero(
    core: CoreApp,
    nats_url: str,
    tmp_path: Path,
    args: tuple[str, ...],
    code: ExitCode,
    message: str,
) -> None:
    result = await nexus(nats_url, tmp_path, *args)
    assert result.exit_code == code, result.output
    assert result.stderr.startswith("error: "), result.stderr
    assert message in result.stderr
    assert len(result.stderr.strip().splitlines()) <= 2  # the error, at most a hint
