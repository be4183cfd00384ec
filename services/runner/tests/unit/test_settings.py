"""Runner settings: NEXUS_<FIELD>, and the former NEXUS_RUNNER_<FIELD> still read with a
warning."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from nexus_runner.config import RunnerSettings


def test_new_names(monkeypatch):
    monkeypatch.setenv("NEXUS_LLM_BASE_URL", "http://model:8000/v1")
    monkeypatch.setenv("NEXUS_HEARTBEAT_INTERVAL", "5")
    settings = RunnerSettings()
    assert settings.llm_base_url == "http://model:8000/v1"
    assert settings.heartbeat_interval == 5


def test_the_old_prefix_still_works_and_warns(monkeypatch):
    monkeypatch.setenv("NEXUS_RUNNER_LLM_BASE_URL", "http://old:8000/v1")
    monkeypatch.setenv("NEXUS_RUNNER_MCP_SECRETS", '{"token": "s3cret"}')
    with pytest.warns(FutureWarning) as warned:
        settings = RunnerSettings()
    assert sorted(str(w.message) for w in warned) == [
        "NEXUS_RUNNER_LLM_BASE_URL is deprecated: set NEXUS_LLM_BASE_URL instead",
        "NEXUS_RUNNER_MCP_SECRETS is deprecated: set NEXUS_MCP_SECRETS instead",
    ]
    assert settings.llm_base_url == "http://old:8000/v1"
    assert settings.mcp_secrets["token"].get_secret_value() == "s3cret"
    # Both set: the new name wins (the old one is still reported).
    monkeypatch.setenv("NEXUS_LLM_BASE_URL", "http://new:8000/v1")
    with pytest.warns(FutureWarning):
        assert RunnerSettings().llm_base_url == "http://new:8000/v1"


def test_bad_settings_end_the_runner_with_one_line_and_exit_2():
    """`python -m nexus_runner` with an invalid variable: one line naming it, status 2
    (nexus_events.runtime.process.EXIT_BAD_SETTINGS), before it connects anywhere; no traceback."""
    env = {**os.environ, "OTEL_SDK_DISABLED": "true", "NEXUS_LLM_TIMEOUT": "often"}
    done = subprocess.run(
        [sys.executable, "-m", "nexus_runner", "--run-id", "run_1"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("runner: invalid settings: NEXUS_LLM_TIMEOUT: ")
