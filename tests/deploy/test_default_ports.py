"""Every port a service listens on by default is its own: outside the dev stack and compose
(which set ports explicitly) services share one host, so two equal defaults collide
(issue 29: the gateway and plane-sync both took 8090)."""

from __future__ import annotations

import importlib
from collections import defaultdict

from nexus_channel_gateway.config import GatewaySettings
from nexus_events.runtime import services
from nexus_plane_sync.config import PlaneSyncSettings
from pydantic_settings import BaseSettings


def _settings(path: str) -> type[BaseSettings]:
    module, name = path.split(":")
    cls: type[BaseSettings] = getattr(importlib.import_module(module), name)
    return cls


# Every service of the table with its own settings class (flows was missing from a hand-kept
# list: its health port went unchecked).
SERVICES: dict[str, type[BaseSettings]] = {
    spec.name: _settings(spec.settings[0]) for spec in services.SERVICES
}


def default_ports() -> dict[int, list[str]]:
    """Each default listening port (0 and off excluded) with the variables that default to it."""
    found: dict[int, list[str]] = defaultdict(list)
    for service, cls in SERVICES.items():
        prefix = str(cls.model_config.get("env_prefix", ""))
        for name, field in cls.model_fields.items():
            if name.endswith("_port") and isinstance(field.default, int) and field.default:
                found[field.default].append(f"{service}: {prefix}{name}".upper())
    return found


def test_every_default_port_belongs_to_one_setting() -> None:
    ports = default_ports()
    # Five health ports (the runner listens on none) and two ingresses (gateway, plane-sync).
    assert sum(len(names) for names in ports.values()) >= 7, ports
    shared = {port: names for port, names in ports.items() if len(names) > 1}
    assert shared == {}


def test_the_ingress_ports_are_the_documented_ones() -> None:
    assert PlaneSyncSettings.model_fields["webhook_port"].default == 8090
    assert GatewaySettings.model_fields["gateway_port"].default == 8091
