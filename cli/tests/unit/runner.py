"""`nexus ARGS...` in-process, as the usage tests run it."""

from __future__ import annotations

from typer.testing import CliRunner, Result

from nexus_cli.main import app


def nexus(env: dict[str, str], *args: str) -> Result:
    return CliRunner().invoke(app, list(args), env=env, catch_exceptions=False)
