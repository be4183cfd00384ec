"""Scheduler settings: the health endpoint's port from the environment; the old prefix."""

from __future__ import annotations

import warnings

import pytest
from nexus_scheduler.config import SchedulerSettings


def test_health_port_defaults_beside_core_and_can_be_turned_off(monkeypatch):
    assert SchedulerSettings().health_port == 8081
    monkeypatch.setenv("NEXUS_HEALTH_PORT", "off")
    assert SchedulerSettings().health_port is None


def test_the_old_prefix_still_works_and_warns(monkeypatch):
    """NEXUS_SCHEDULER_<FIELD> (the prefix before one NEXUS_ for all) is still read, with a
    FutureWarning naming the new variable; where both are set, the new one wins."""
    monkeypatch.setenv("NEXUS_SCHEDULER_MAX_CONCURRENT_RUNS", "7")
    monkeypatch.setenv("NEXUS_SCHEDULER_AGENT_LIMITS", '{"reviewer": 2}')
    with pytest.warns(FutureWarning) as warned:
        settings = SchedulerSettings()
    assert settings.max_concurrent_runs == 7
    assert settings.agent_limits == {"reviewer": 2}
    assert sorted(str(w.message) for w in warned) == [
        "NEXUS_SCHEDULER_AGENT_LIMITS is deprecated: set NEXUS_AGENT_LIMITS instead",
        "NEXUS_SCHEDULER_MAX_CONCURRENT_RUNS is deprecated: set NEXUS_MAX_CONCURRENT_RUNS instead",
    ]
    monkeypatch.setenv("NEXUS_MAX_CONCURRENT_RUNS", "3")
    with pytest.warns(FutureWarning):
        assert SchedulerSettings().max_concurrent_runs == 3


def test_the_new_names_do_not_warn(monkeypatch):
    monkeypatch.setenv("NEXUS_MAX_CONCURRENT_RUNS", "5")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert SchedulerSettings().max_concurrent_runs == 5
