"""Runner settings: NEXUS_<FIELD>, and the former NEXUS_RUNNER_<FIELD> still read with a
warning."""

from __future__ import annotations

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
