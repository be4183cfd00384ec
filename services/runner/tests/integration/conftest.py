"""Fixtures for runner scenarios: a runner bus, fast settings, a repo with a bare remote, and
an in-memory span exporter installed as the process's tracer provider."""

from __future__ import annotations

import subprocess
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from nexus_events.runtime import telemetry
from nexus_events.transport.bus import Bus, BusSettings
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from nexus_runner.config import RunnerSettings

CALC_BUGGY = "def add(a, b):\n    return a - b\n"
TEST_CALC = "from calc import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n"


def git(cwd: Path, *args: str) -> str:
    env = {
        "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@x",
        "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@x", "PATH": "/usr/bin:/bin",
    }  # fmt: skip
    return subprocess.run(
        ["git", *args], cwd=cwd, env=env, check=True, capture_output=True, text=True
    ).stdout


@pytest.fixture
def exporter(monkeypatch: pytest.MonkeyPatch) -> Iterator[InMemorySpanExporter]:
    monkeypatch.setattr(telemetry, "_installed", {})
    spans = InMemorySpanExporter()
    provider = telemetry.setup_telemetry("runner-test", exporter=spans, env={})
    assert provider is not None
    yield spans
    provider.shutdown()


@pytest.fixture
def remote(tmp_path: Path) -> Path:
    """A bare repository holding a tiny Python project whose test fails."""
    src = tmp_path / "src-repo"
    src.mkdir()
    git(src, "init", "-q", "-b", "main")
    (src / "calc.py").write_text(CALC_BUGGY)
    (src / "test_calc.py").write_text(TEST_CALC)
    (src / "pyproject.toml").write_text('[project]\nname = "calc"\nversion = "0"\n')
    (src / ".gitignore").write_text("__pycache__/\n.pytest_cache/\n")
    git(src, "add", "-A")
    git(src, "commit", "-q", "-m", "initial")
    bare = tmp_path / "remote.git"
    git(tmp_path, "clone", "-q", "--bare", str(src), str(bare))
    return bare


@pytest.fixture
def settings(tmp_path: Path) -> RunnerSettings:
    return RunnerSettings(
        workspace_root=tmp_path / "runs",
        llm_api_key="test",
        heartbeat_interval=0.2,
        approval_timeout=5,
        retry_base_delay=0.01,
        retry_max_delay=0.5,
        stuck_repeat_threshold=3,
        stuck_idle_turns=3,
        shell_timeout=30,
        log_chunk_chars=16,
        budget_reservations="off",  # no spend service here (test_spend_gate stands one up)
    )


@pytest.fixture
async def runner_bus(bus: Bus, nats_url: str) -> AsyncIterator[Bus]:
    """The runner's own connection (source ``runner``); `bus` ensured the streams."""
    b = await Bus.connect(BusSettings(url=nats_url, name="runner"), source="runner")
    try:
        yield b
    finally:
        await b.close()
