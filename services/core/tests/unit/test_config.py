"""Core's settings: the GC threshold follows the projection batch unless set; health can be off."""

from __future__ import annotations

from nexus_core.config import CoreSettings


def test_gc_threshold_defaults_to_the_batch_sizing():
    assert CoreSettings().effective_gc_threshold() == 200_000
    assert CoreSettings(projection_batch=20_000).effective_gc_threshold() == 800_000


def test_an_explicit_gc_threshold_wins_and_zero_means_python_defaults(monkeypatch):
    monkeypatch.setenv("NEXUS_GC_THRESHOLD", "75000")
    assert CoreSettings().effective_gc_threshold() == 75_000
    assert CoreSettings(gc_threshold=0).effective_gc_threshold() == 0


def test_the_health_endpoint_can_be_turned_off_from_the_environment(monkeypatch):
    monkeypatch.setenv("NEXUS_HEALTH_PORT", "off")
    assert CoreSettings().health_port is None
