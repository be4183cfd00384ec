"""The CLI through typer's CliRunner with no servers: an environment that points nowhere."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    return {
        "NEXUS_DEV_HOME": str(tmp_path / ".nexus"),
        "NEXUS_CONTEXT_FILE": str(tmp_path / "contexts.yaml"),
        "NEXUS_NATS_URL": "",
        "NEXUS_CONTEXT": "",
        "COLUMNS": "200",
    }
