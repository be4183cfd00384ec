"""deploy/compose.yaml as the tests see it: loaded, interpolated like `docker compose` does,
and the environment variable names each Nexus service's Settings classes read."""

from __future__ import annotations

import importlib
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml
from nexus_events.runtime import services
from pydantic_settings import BaseSettings

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "deploy/compose.yaml"
# Services built from this repository: compose name -> python package run by its entrypoint;
# each service of the table (nexus_events.runtime.services) and the variants compose runs it as
# (core-mongodb), found by their entrypoint.
# Standard OpenTelemetry SDK variables (read by nexus_events.runtime.telemetry / metrics setup).
OTEL_VARS = {"OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_SERVICE_NAME", "OTEL_RESOURCE_ATTRIBUTES"}

_VAR = re.compile(
    r"\$(?:\$|\{(?P<braced>[A-Za-z_][A-Za-z0-9_]*)(?:(?P<op>:?-)(?P<default>[^}]*))?\}|(?P<bare>[A-Za-z_][A-Za-z0-9_]*))"
)


def interpolate(value: Any, env: Mapping[str, str]) -> Any:
    """Compose variable substitution: ``$$``, ``$VAR``, ``${VAR}``, ``${VAR:-d}``, ``${VAR-d}``."""
    if isinstance(value, dict):
        return {k: interpolate(v, env) for k, v in value.items()}
    if isinstance(value, list):
        return [interpolate(v, env) for v in value]
    if not isinstance(value, str):
        return value

    def sub(m: re.Match[str]) -> str:
        if m.group(0) == "$$":
            return "$"
        name = m.group("braced") or m.group("bare")
        have = env.get(name)
        if m.group("op") == ":-" and not have:
            return m.group("default")
        if m.group("op") == "-" and have is None:
            return m.group("default")
        return have or ""

    return _VAR.sub(sub, value)


def load_raw() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load(COMPOSE.read_text())
    return data


def load(env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The compose model after interpolation (`env` defaults to none set: the dev defaults)."""
    return interpolate(load_raw(), env or {})


def environment(service: dict[str, Any]) -> dict[str, str]:
    env = service.get("environment", {})
    if isinstance(env, list):
        env = dict(item.split("=", 1) for item in env)
    return {k: str(v) for k, v in env.items()}


def nexus_services() -> dict[str, str]:
    modules = {spec.module for spec in services.LONG_RUNNING}
    found = {}
    for name, service in load_raw()["services"].items():
        entry = service.get("entrypoint", [])
        if entry[:2] == ["python", "-m"] and entry[2] in modules:
            found[name] = entry[2]
    return found


def settings_classes(package: str) -> list[type[BaseSettings]]:
    """The Settings classes whose variables a service's process (and its children: the
    scheduler's local runs) read, as the service table names them."""
    from nexus_events.contract.streams import StreamSettings
    from nexus_events.runtime.metrics import MetricsSettings
    from nexus_events.transport.bus import BusSettings

    common: list[type[BaseSettings]] = [BusSettings, StreamSettings, MetricsSettings]
    [spec] = [s for s in services.SERVICES if s.module == package]
    paths = [
        *spec.settings,
        *(p for child in spec.spawns for p in services.service(child).settings),
    ]
    return [*(_load(path) for path in paths), *common]


def _load(path: str) -> type[BaseSettings]:
    module, name = path.split(":")
    cls: type[BaseSettings] = getattr(importlib.import_module(module), name)
    return cls


NEXUS_SERVICES = nexus_services()


def env_names(cls: type[BaseSettings]) -> set[str]:
    prefix = str(cls.model_config.get("env_prefix", ""))
    return {(prefix + name).upper() for name in cls.model_fields}


CLUSTER_OVERRIDE = ROOT / "deploy/compose.cluster.yaml"


def load_override_raw() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load(CLUSTER_OVERRIDE.read_text())
    return data


def _volume_target(volume: str) -> str:
    return volume.split(":")[1]


def _merge_service(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    """Compose's merge of one service given in several files (the rules this repository's
    files rely on): maps merge key by key (environment, depends_on, healthcheck), volumes merge
    by their container path, any other value (command, profiles, ports, ...) is replaced."""
    out = dict(base)
    for key, value in override.items():
        if key == "volumes":
            merged = {_volume_target(v): v for v in base.get("volumes", [])}
            merged.update({_volume_target(v): v for v in value})
            out[key] = list(merged.values())
        elif isinstance(value, dict) and isinstance(base.get(key), dict):
            out[key] = {**base[key], **value}
        else:
            out[key] = value
    return out


def merge_files(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    """`docker compose -f base -f override`: services merged, other top-level maps joined."""
    out = dict(base)
    for key, value in override.items():
        if key.startswith("x-"):
            continue
        if key == "services":
            services = dict(base["services"])
            for name, service in value.items():
                services[name] = (
                    _merge_service(services[name], service) if name in services else service
                )
            out["services"] = services
        else:
            out[key] = {**base.get(key, {}), **value}
    return out


def load_cluster(env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """compose.yaml with compose.cluster.yaml over it, interpolated (the cluster profile)."""
    return interpolate(merge_files(load_raw(), load_override_raw()), env or {})
