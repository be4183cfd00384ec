from __future__ import annotations

import pytest

from nexus_flows.config import FlowsSettings


def test_every_setting_is_described_and_reads_nexus_variables(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert all(f.description for f in FlowsSettings.model_fields.values())
    monkeypatch.setenv("NEXUS_TIMER_INTERVAL", "0.5")
    monkeypatch.setenv("NEXUS_HEALTH_PORT", "off")
    s = FlowsSettings()
    assert s.timer_interval == 0.5
    assert s.health_port is None
