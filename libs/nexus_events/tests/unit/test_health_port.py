"""A health port setting from the environment: a number, or off."""

from __future__ import annotations

import pytest
from nexus_events.runtime.health import HealthPort
from pydantic import TypeAdapter


@pytest.mark.parametrize(
    ("raw", "port"), [("off", None), ("", None), (" None ", None), ("0", 0), ("8081", 8081)]
)
def test_health_port_from_the_environment(raw: str, port: int | None):
    assert TypeAdapter(HealthPort).validate_python(raw) == port
