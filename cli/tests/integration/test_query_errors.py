"""The CLI turns core's query errors into one line and a documented exit code, whatever the
error quotes: run against a real core on a real nats-server and PostgreSQL."""

from __future__ import annotations

from pathlib import Path

import pytest
from nexus_core.app import CoreApp
from tests.support.cli import nexus

from nexus_cli.errors import ExitCode


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
