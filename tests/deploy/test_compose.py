"""deploy/compose.yaml: valid Compose, and no drift from the code it runs."""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path

import jsonschema
import pytest
from nexus_scheduler.callout_jwt import Issuer

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
    "RUNNER_NATS_PASSWORD": "NEXUS_LOCAL_COMMAND",
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
    assert env["NEXUS_RUNTIME"] == "local"
    command = json.loads(env["NEXUS_LOCAL_COMMAND"])
    # No identity swapped in by the command: the runtime gives each run its own credential.
    assert command == ["python", "-m", "nexus_runner"]
    assert importlib.util.find_spec("nexus_runner.__main__") is not None


def test_the_scheduler_holds_the_seed_of_the_issuer_nats_trusts() -> None:
    services = load()["services"]
    seed = _default(environment(services["scheduler"])["NEXUS_AUTH_CALLOUT_SEED"])
    issuer = _default(environment(services["nats"])["NEXUS_AUTH_CALLOUT_ISSUER"])
    assert Issuer(seed).public_key == issuer
    assert not any("RUNNER_NATS_PASSWORD" in k for k in environment(services["scheduler"]))


def _default(value: str) -> str:
    """The default of a ``${VAR:-default}`` reference."""
    return value.split(":-", 1)[-1].rstrip("}")


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
            if source.startswith(("./", "../")):
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


OBSERVABILITY = {"otel-collector", "tempo", "grafana"}


def test_observability_is_a_profile_nothing_depends_on() -> None:
    """`docker compose up` starts the Nexus stack without the images no registry here has."""
    services = load()["services"]
    for name in OBSERVABILITY:
        assert services[name]["profiles"] == ["observability"], name
    # Prometheus has a Debian package (compose-test's stand-in): it stays in the default set.
    assert "profiles" not in services["prometheus"]
    assert "depends_on" not in services["prometheus"]
    # The OTLP endpoint stays: with the profile on, traces flow; without, export just fails.
    for name in NEXUS_SERVICES:
        assert environment(services[name])["OTEL_EXPORTER_OTLP_ENDPOINT"].startswith(
            "http://otel-collector:"
        )


def test_no_service_depends_on_one_its_profiles_may_leave_out() -> None:
    services = load()["services"]
    for name, service in services.items():
        mine = set(service.get("profiles", []))
        for dep in service.get("depends_on", {}):
            theirs = set(services[dep].get("profiles", []))
            # A dependency is started whenever this service is: it has no profile, or shares one.
            assert not theirs or theirs & mine, f"{name} {mine} depends on {dep} {theirs}"


def test_the_test_profile_serves_the_offline_model_to_the_runs() -> None:
    services = load()["services"]
    model = services["offline-model"]
    assert model["profiles"] == ["test"]
    mounted = model["volumes"][0].split(":")
    assert model["entrypoint"][1:3] == ["-m", "offline_model"]
    assert mounted[1] == f"{model['working_dir']}/offline_model"
    assert (ROOT / "deploy" / mounted[0]).resolve() == (
        ROOT / "cli/src/nexus_cli/devstack/offline_model"
    )
    port = model["entrypoint"][model["entrypoint"].index("--port") + 1]
    assert f":{port}/v1/models" in " ".join(model["healthcheck"]["test"])
    # Same image as the scheduler, so `compose build` builds it once for both.
    assert model["image"] == services["scheduler"]["image"]
    assert model["build"] == services["scheduler"]["build"]
    # The runs and memory's extraction follow one variable to their model server.
    with_model = load({"NEXUS_LLM_BASE_URL": f"http://offline-model:{port}/v1"})["services"]
    assert environment(with_model["scheduler"])["NEXUS_LLM_BASE_URL"].startswith(
        "http://offline-model:"
    )
    assert environment(with_model["memory"])["NEXUS_LLM_BASE_URL"].startswith(
        "http://offline-model:"
    )


def test_the_test_profile_serves_the_fakes_plane_sync_and_the_gateway_talk_to() -> None:
    env = {
        "NEXUS_PLANE_URL": "http://fake-plane:8080",
        "NEXUS_PLANE_API_KEY": "k-1",
        "NEXUS_PLANE_WORKSPACE": "ws-1",
        "NEXUS_PLANE_PROJECT_ID": "p-1",
        "NEXUS_PLANE_WEBHOOK_SECRET": "s-1",
        "NEXUS_SLACK_BASE_URL": "http://fake-slack:8080/api/",
        "NEXUS_SLACK_BOT_TOKEN": "xoxb-1",
    }
    services = load(env)["services"]
    fake_plane, fake_slack = services["fake-plane"], services["fake-slack"]
    for fake, talker in ((fake_plane, "plane-sync"), (fake_slack, "channel-gateway")):
        assert fake["profiles"] == ["test"]
        # The image of the service that talks to it (aiohttp, httpx), built once for both.
        assert (fake["image"], fake["build"]) == (
            services[talker]["image"],
            services[talker]["build"],
        )
        assert fake["entrypoint"][:3] == ["python", "-m", "tests.fakes"]
        assert "--port=8080" in fake["entrypoint"]
        assert "8080" in " ".join(fake["healthcheck"]["test"])
        mounts = {
            v.split(":")[1]: (ROOT / "deploy" / v.split(":")[0]).resolve() for v in fake["volumes"]
        }
        assert mounts[f"{fake['working_dir']}/tests/fakes"] == ROOT / "tests" / "fakes"
    # The fake Plane takes plane-sync's key, workspace, project and secret, and sends its
    # webhooks to plane-sync's endpoint.
    plane_sync = environment(services["plane-sync"])
    args = fake_plane["entrypoint"]
    assert f"--api-key={plane_sync['NEXUS_PLANE_API_KEY']}" in args
    assert f"--workspace={plane_sync['NEXUS_PLANE_WORKSPACE']}" in args
    assert f"--project-id={plane_sync['NEXUS_PLANE_PROJECT_ID']}" in args
    assert f"--webhook-secret={plane_sync['NEXUS_PLANE_WEBHOOK_SECRET']}" in args
    port = plane_sync["NEXUS_WEBHOOK_PORT"]
    assert f"--webhook=http://plane-sync:{port}/webhooks/plane" in args
    assert plane_sync["NEXUS_PLANE_URL"] == "http://fake-plane:8080"
    gateway = environment(services["channel-gateway"])
    assert f"--token={gateway['NEXUS_SLACK_BOT_TOKEN']}" in fake_slack["entrypoint"]
    assert gateway["NEXUS_SLACK_BASE_URL"] == "http://fake-slack:8080/api/"


def test_host_ports_move_with_variables() -> None:
    moved = load({"NATS_PORT": "14222", "POSTGRES_PORT": "15432"})["services"]
    assert moved["nats"]["ports"][0] == "14222:4222"
    assert moved["postgres"]["ports"][0] == "15432:5432"
    assert load()["services"]["nats"]["ports"][0] == "4222:4222"
    moved = load({"PLANE_SYNC_PORT": "18090", "GATEWAY_PORT": "18091"})["services"]
    assert moved["plane-sync"]["ports"][0] == "18090:8090"
    assert moved["channel-gateway"]["ports"][0] == "18091:8090"
    assert load()["services"]["channel-gateway"]["ports"][0] == "8091:8090"


def test_dockerfile_builds_without_buildkit_or_ghcr() -> None:
    """Docker's legacy builder and podman reject heredocs; ghcr.io may be out of reach."""
    text = DOCKERFILE.read_text()
    instructions = [line for line in text.splitlines() if line and not line.startswith("#")]
    assert not [line for line in instructions if "<<" in line], "heredoc in the Dockerfile"
    assert not [line for line in instructions if line.startswith("# syntax=")]
    froms = re.findall(r"^FROM (\S+)", text, re.MULTILINE)
    stages = set(re.findall(r"^FROM \S+ AS (\S+)$", text, re.MULTILINE))
    external = {f for f in froms if f not in stages}
    assert external == {"python:${PYTHON_VERSION}-slim"}, external
    for source in re.findall(r"^COPY (?!--from)(\S+) ", text, re.MULTILINE):
        assert (ROOT / source).exists(), source
    assert "uv==${UV_VERSION}" in text


def test_the_runner_image_owns_the_runs_volume_path() -> None:
    """Docker copies an image directory's owner into an empty named volume: the scheduler's
    `runs` volume is writable only if the image has /var/lib/nexus owned by the run user."""
    services = load()["services"]
    mount = next(v for v in services["scheduler"]["volumes"] if v.startswith("runs:"))
    path = mount.split(":")[1]
    env = environment(services["scheduler"])
    for key in ("NEXUS_LOCAL_WORKDIR", "NEXUS_WORKSPACE_ROOT"):
        assert env[key].startswith(path + "/"), key
    body = DOCKERFILE.read_text().split("AS runner\n", 1)[1]
    before_user = body.split("USER 10001:10001", 1)[0]
    made = re.search(r"install -d -o 10001 -g 10001 ([^\n]+)", before_user)
    assert made is not None, "runner stage does not create its volume path as the run user"
    assert path in made.group(1).split()
