"""deploy/compose.yaml: valid Compose, and no drift from the code it runs."""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path

import jsonschema
import pytest

from .compose_model import (
    NEXUS_SERVICES,
    OTEL_VARS,
    ROOT,
    env_names,
    environment,
    load,
    load_raw,
    settings_classes,
)

SCHEMA = Path(__file__).parent / "schemas/compose-spec.json"
DOCKERFILE = ROOT / "deploy/docker/Dockerfile"
# Variables some Nexus service reads that no Settings class holds, with who reads them.
EXTRA_VARS = {
    # The scheduler's local_command wrapper hands it to the runner as NEXUS_NATS_PASSWORD.
    "RUNNER_NATS_PASSWORD": "NEXUS_SCHEDULER_LOCAL_COMMAND",
}


def test_compose_matches_the_compose_specification() -> None:
    schema = json.loads(SCHEMA.read_text())
    validator = jsonschema.Draft201909Validator(schema)
    errors = sorted(validator.iter_errors(load_raw()), key=lambda e: list(e.path))
    assert not errors, "\n".join(f"{list(e.path)}: {e.message}" for e in errors)


def test_the_schema_rejects_a_broken_file() -> None:
    validator = jsonschema.Draft201909Validator(json.loads(SCHEMA.read_text()))
    broken = load_raw()
    broken["services"]["core"]["depends_on"]["nats"]["condition"] = "when_ready"
    assert list(validator.iter_errors(broken))


@pytest.mark.parametrize("name", sorted(NEXUS_SERVICES))
def test_every_variable_is_read_by_the_code(name: str) -> None:
    service = load()["services"][name]
    package = NEXUS_SERVICES[name]
    known = set().union(*(env_names(c) for c in settings_classes(package))) | OTEL_VARS
    env = environment(service)
    unknown = {k for k in env if k not in known and k not in EXTRA_VARS}
    assert not unknown, f"{name} sets variables no Settings class of {package} reads: {unknown}"
    for var, reader in EXTRA_VARS.items():
        if var in env:
            assert var in env[reader], f"{var} is set but {reader} does not use it"


@pytest.mark.parametrize("name", sorted(NEXUS_SERVICES))
def test_the_values_parse_with_the_settings_classes(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    env = environment(load()["services"][name])
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    for cls in settings_classes(NEXUS_SERVICES[name]):
        cls()  # raises on a value the code cannot parse (bad JSON list, port, enum...)


@pytest.mark.parametrize("name", sorted(NEXUS_SERVICES))
def test_every_command_exists(name: str) -> None:
    service = load()["services"][name]
    entry = service["entrypoint"]
    assert entry[:2] == ["python", "-m"], entry
    assert entry[2] == NEXUS_SERVICES[name]
    assert importlib.util.find_spec(f"{entry[2]}.__main__") is not None


def test_the_local_runtime_command_runs_the_runner() -> None:
    env = environment(load()["services"]["scheduler"])
    assert env["NEXUS_SCHEDULER_RUNTIME"] == "local"
    command = json.loads(env["NEXUS_SCHEDULER_LOCAL_COMMAND"])
    assert "exec python -m nexus_runner" in command[2]
    assert importlib.util.find_spec("nexus_runner.__main__") is not None


def test_services_wait_for_healthy_dependencies() -> None:
    services = load()["services"]
    for name, service in services.items():
        for dep, cond in service.get("depends_on", {}).items():
            assert dep in services, f"{name} depends on unknown {dep}"
            if cond["condition"] == "service_healthy":
                assert "healthcheck" in services[dep], f"{dep} has no healthcheck"
    for name in NEXUS_SERVICES:
        assert "healthcheck" in services[name]
        assert services[name]["depends_on"]["nats"]["condition"] == "service_healthy"


def test_core_health_port_matches_its_healthcheck() -> None:
    core = load()["services"]["core"]
    port = environment(core)["NEXUS_HEALTH_PORT"]
    assert f":{port}/readyz" in " ".join(core["healthcheck"]["test"])


def test_mongodb_profile_switches_the_catalog() -> None:
    services = load()["services"]
    mongo_core = services["core-mongodb"]
    assert mongo_core["profiles"] == ["mongodb"]
    assert services["mongodb"]["profiles"] == ["mongodb"]
    assert environment(mongo_core)["NEXUS_CATALOG_URL"].startswith("mongodb://mongodb:")
    assert "NEXUS_CATALOG_URL" not in environment(services["core"])
    assert mongo_core["depends_on"]["mongodb"]["condition"] == "service_healthy"


def test_config_files_mounted_by_compose_exist() -> None:
    for name, service in load()["services"].items():
        for volume in service.get("volumes", []):
            source = volume.split(":", 1)[0]
            if source.startswith("./"):
                assert (ROOT / "deploy" / source).exists(), f"{name} mounts missing {source}"


def test_dockerfile_has_the_targets_compose_builds() -> None:
    text = DOCKERFILE.read_text()
    stages = set(re.findall(r"^FROM \S+ AS (\S+)$", text, re.MULTILINE))
    for name, service in load()["services"].items():
        build = service.get("build")
        if not build:
            continue
        assert build["target"] in stages, f"{name}: no stage {build['target']}"
        svc = build.get("args", {}).get("SERVICE")
        if svc is not None:
            assert (ROOT / "services" / svc / "pyproject.toml").exists()
    # Non-root in every final image; the uid is the runner pods' uid.
    for stage in ("service", "runner"):
        body = text.split(f"AS {stage}\n", 1)[1].split("\nFROM ", 1)[0]
        assert "USER 10001:10001" in body, stage
