"""The service table (`nexus_events.runtime.services`) and the files that must follow it: compose,
Kubernetes, the NATS users, the roles of the contract, the CLI's dev-stack extra and the docs.

Each service of the table appears in each with its NATS user, ports and probes; nothing that
runs a Nexus module appears outside the table. (The NATS config, the dev supervisor's list,
the AsyncAPI tags and the config reference are generated from the table; their own tests
check them.)
"""

from __future__ import annotations

import importlib
import importlib.util
import re
import tomllib
from typing import Any

import pytest
from nexus_events.contract.roles import Service
from nexus_events.runtime import services
from nexus_events.runtime.services import LIVENESS_PATH, READINESS_PATH, ServiceSpec

from tests.support.nats_render import load_renderer

from .compose_model import ROOT, environment, load, load_raw
from .kustomize import render

LONG_RUNNING = {s.name: s for s in services.LONG_RUNNING}
ADMIN_PASSWORD = "NEXUS_ADMIN_NATS_PASSWORD"  # the operators' user (deploy/nats/render.py)
NEXUS_MODULE = re.compile(r"^nexus_[a-z_]+$")


def _ids(specs: dict[str, ServiceSpec]) -> list[str]:
    return sorted(specs)


def _password_variables() -> set[str]:
    renderer = load_renderer()
    static = [s.nats_user for s in services.SERVICES if s.nats_user not in renderer.CALLOUT_USERS]
    users = [*static, *renderer.CLIENTS]
    return {renderer.password_variable(u) for u in users} | {ADMIN_PASSWORD}


def _settings(spec: ServiceSpec) -> Any:
    module, name = spec.settings[0].split(":")
    return getattr(importlib.import_module(module), name)


def _health_port_value(env: dict[str, str]) -> str:
    """The value of the one variable that sets the health port (its prefix is the service's)."""
    [value] = [v for k, v in env.items() if k.endswith("_HEALTH_PORT")]
    return value


# --- the table itself --------------------------------------------------------------------


def test_the_table_names_real_packages_modules_and_settings() -> None:
    for spec in services.SERVICES:
        assert importlib.util.find_spec(f"{spec.module}.__main__") is not None, spec.name
        pyproject = ROOT / "services" / spec.name / "pyproject.toml"
        assert tomllib.loads(pyproject.read_text())["project"]["name"] == spec.package
        for path in spec.settings:
            module, name = path.split(":")
            assert hasattr(importlib.import_module(module), name), path
        for child in spec.spawns:
            assert services.service(child).kind is services.Kind.PER_RUN
        if spec.kind is services.Kind.SERVICE:
            # The code's default is the deployed port: one number, whichever way it starts.
            assert _settings(spec).model_fields["health_port"].default == spec.health_port
        else:
            assert spec.ports == {}
    assert len({s.name for s in services.SERVICES}) == len(services.SERVICES)
    with pytest.raises(KeyError, match="no service 'nope'"):
        services.service("nope")


def test_the_roles_of_the_contract_are_the_tables_services_the_cli_mcp_and_operators() -> None:
    parties = {"cli", "operator", "mcp"}
    assert {s.value for s in Service} == {s.name for s in services.SERVICES} | parties


def test_the_nats_users_are_the_tables() -> None:
    renderer = load_renderer()
    assert [user for user, _ in renderer.table_users()] == [s.nats_user for s in services.SERVICES]
    users = re.findall(r'^\s+user: "([^"]+)"$', renderer.render(), re.MULTILINE)
    # Runners have no static user: the auth callout gives each run its own.
    static = [s.nats_user for s in services.SERVICES if s.nats_user not in renderer.CALLOUT_USERS]
    assert users == [*static, *renderer.CLIENTS, "admin"]
    assert {"runner"} == renderer.CALLOUT_USERS


# --- compose -------------------------------------------------------------------------------


@pytest.mark.parametrize("name", _ids(LONG_RUNNING))
def test_compose_runs_each_service_as_the_table_says(name: str) -> None:
    spec = LONG_RUNNING[name]
    compose = load()["services"][name]
    raw_env = environment(load_raw()["services"][name])
    env = environment(compose)
    renderer = load_renderer()
    assert compose["entrypoint"] == ["python", "-m", spec.module]
    assert env["NEXUS_NATS_USER"] == spec.nats_user
    assert env["NEXUS_NATS_NAME"] == spec.name
    assert raw_env["NEXUS_NATS_PASSWORD"].startswith(
        "${" + renderer.password_variable(spec.nats_user)
    )
    assert _health_port_value(env) == str(spec.health_port)
    probe = " ".join(compose["healthcheck"]["test"])
    assert f"127.0.0.1:{spec.health_port}{READINESS_PATH}" in probe
    assert ("NEXUS_DATABASE_URL" in env) is spec.database
    assert compose.get("profiles") == ([spec.profile.name] if spec.profile else None)
    published = [p.rsplit(":", 1)[1] for p in compose.get("ports", [])]
    assert published == ([str(spec.ingress_port)] if spec.ingress_port else [])


def test_compose_runs_no_nexus_module_outside_the_table() -> None:
    modules = {s.module for s in services.LONG_RUNNING}
    for name, service in load_raw()["services"].items():
        entry = service.get("entrypoint", [])
        if entry[:2] == ["python", "-m"] and NEXUS_MODULE.match(entry[2]):
            assert entry[2] in modules, f"compose service {name} runs {entry[2]}: not in the table"


def test_compose_gives_nats_every_users_password_and_no_other() -> None:
    nats = environment(load()["services"]["nats"])
    issuer = load_renderer().AUTH_CALLOUT_ISSUER_VARIABLE
    assert set(nats) == _password_variables() | {issuer}


# --- Kubernetes ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def base() -> list[dict[str, Any]]:
    return render(ROOT / "deploy/k8s/base")


def _find(objs: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    [obj] = [o for o in objs if o["kind"] == kind and o["metadata"]["name"] == name]
    return obj


def _env(container: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: str(e.get("value")) for e in container.get("env", [])}


@pytest.mark.parametrize("name", _ids(LONG_RUNNING))
def test_kubernetes_runs_each_service_as_the_table_says(
    name: str, base: list[dict[str, Any]]
) -> None:
    spec = LONG_RUNNING[name]
    deployment = _find(base, "Deployment", name)
    pod = deployment["spec"]["template"]["spec"]
    [container] = pod["containers"]
    assert container["command"] == ["python", "-m", spec.module]
    assert {p["name"]: p["containerPort"] for p in container["ports"]} == spec.ports
    for probe, path in (
        ("startupProbe", LIVENESS_PATH),
        ("livenessProbe", LIVENESS_PATH),
        ("readinessProbe", READINESS_PATH),
    ):
        assert container[probe]["httpGet"] == {"path": path, "port": "health"}, probe
    env = _env(container)
    assert env["NEXUS_NATS_NAME"] == spec.name
    assert _health_port_value(env) == str(spec.health_port)
    # Its NATS identity and database come from its own Secret.
    secrets = [e["secretRef"]["name"] for e in container["envFrom"] if "secretRef" in e]
    assert secrets == [f"{name}-env"]
    secret = _find(base, "Secret", f"{name}-env")["stringData"]
    assert secret["NEXUS_NATS_USER"] == spec.nats_user
    assert ("NEXUS_DATABASE_URL" in secret) is spec.database
    # A Service in front of it (the scheduler has none: nothing calls it) serves its ports
    # under the same names, the ingress port always.
    fronts = [o for o in base if o["kind"] == "Service" and o["metadata"]["name"] == name]
    assert fronts or spec.ingress_port is None
    for svc in fronts:
        served = {p["name"]: p["port"] for p in svc["spec"]["ports"]}
        assert served.items() <= spec.ports.items()
        assert spec.ingress_port is None or served[spec.ingress_name] == spec.ingress_port
        assert svc["spec"]["selector"] == {"app.kubernetes.io/name": name}


def _opened_ports(base: list[dict[str, Any]], name: str) -> set[int]:
    """The ports NetworkPolicies open to a service's pods from outside the NATS client set."""
    ports: set[int] = set()
    for policy in (o for o in base if o["kind"] == "NetworkPolicy"):
        selector = policy["spec"]["podSelector"].get("matchLabels", {})
        if selector.get("app.kubernetes.io/name") != name:
            continue
        for rule in policy["spec"].get("ingress", []):
            ports |= {p["port"] for p in rule.get("ports", [])}
    return ports


@pytest.mark.parametrize("name", _ids(LONG_RUNNING))
def test_kubernetes_opens_only_the_ingress_port(name: str, base: list[dict[str, Any]]) -> None:
    spec = LONG_RUNNING[name]
    assert _opened_ports(base, name) == ({spec.ingress_port} if spec.ingress_port else set())


def test_kubernetes_runs_no_nexus_module_outside_the_table(base: list[dict[str, Any]]) -> None:
    modules = {s.module: s.name for s in services.LONG_RUNNING}
    for workload in (o for o in base if o["kind"] in ("Deployment", "StatefulSet")):
        for container in workload["spec"]["template"]["spec"]["containers"]:
            command = container.get("command", [])
            if command[:2] == ["python", "-m"] and NEXUS_MODULE.match(command[2]):
                assert modules.get(command[2]) == workload["metadata"]["name"], command


def test_kubernetes_holds_every_users_password_and_the_runners_identity(
    base: list[dict[str, Any]],
) -> None:
    issuer = load_renderer().AUTH_CALLOUT_ISSUER_VARIABLE
    users = _find(base, "Secret", "nats-users")["stringData"]
    assert set(users) == _password_variables() | {issuer}
    assert "NEXUS_AUTH_CALLOUT_SEED" in _find(base, "Secret", "scheduler-env")["stringData"]
    for spec in (s for s in services.SERVICES if s.kind is services.Kind.PER_RUN):
        secret = _find(base, "Secret", f"{spec.name}-env")
        assert secret["metadata"]["namespace"] == "nexus-runs"
        # No shared identity: each run's Job carries its run's credential (the scheduler's).
        assert "NEXUS_NATS_USER" not in secret["stringData"]
        assert "NEXUS_NATS_PASSWORD" not in secret["stringData"]


# --- the CLI and the docs ------------------------------------------------------------------


def test_the_dev_stack_extra_installs_every_service_of_the_table() -> None:
    from nexus_cli.commands.dev import DEV_STACK_MODULES
    from nexus_cli.devstack.supervisor import APP_SERVICES

    cli = tomllib.loads((ROOT / "cli/pyproject.toml").read_text())
    extra = {
        re.split(r"[<>=\[ ]", d)[0] for d in cli["project"]["optional-dependencies"]["dev-stack"]
    }
    packages = {s.package for s in services.SERVICES}
    assert {d for d in extra if d.startswith("nexus-")} == packages
    assert packages <= set(cli["tool"]["uv"]["sources"])
    # `nexus dev up` refuses to start without what it always runs (optional ones aside).
    always = {s.module for s in services.LONG_RUNNING if s.profile is None}
    spawned = {services.service(c).module for s in services.SERVICES for c in s.spawns}
    assert always | spawned <= set(DEV_STACK_MODULES)
    # The supervisor's list is the table's, and names health settings the services read.
    assert [a.name for a in APP_SERVICES] == [s.name for s in services.LONG_RUNNING]
    for app in APP_SERVICES:
        settings = _settings(services.service(app.name))
        prefix = str(settings.model_config.get("env_prefix", ""))
        names = {(prefix + field).upper() for field in settings.model_fields}
        assert {app.health_host_env, app.health_port_env} <= names, app.name


def test_the_deploy_docs_list_every_service() -> None:
    text = (ROOT / "docs/deploy.md").read_text()
    for spec in services.LONG_RUNNING:
        assert re.search(
            rf"^\| {re.escape(spec.name)} \|.*`python -m {spec.module}`", text, re.M
        ), f"docs/deploy.md's compose table has no row for {spec.name}"


def test_adding_a_service_is_documented() -> None:
    text = (ROOT / "docs/deploy.md").read_text()
    assert "## Adding a service" in text
    assert "nexus_events/runtime/services.py" in text
