"""Scheduler settings: the health endpoint's port from the environment."""

from __future__ import annotations

from nexus_scheduler.config import SchedulerSettings


def test_health_port_defaults_beside_core_and_can_be_turned_off(monkeypatch):
    assert SchedulerSettings().health_port == 8081
    monkeypatch.setenv("NEXUS_SCHEDULER_HEALTH_PORT", "off")
    assert SchedulerSettings().health_port is None
