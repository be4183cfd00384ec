"""The MCP server as deployed (docs/mcp.md): compose's `mcp` service and the Kubernetes
Deployment run `nexus mcp serve --http` from the `cli` image, as the NATS user mcp-read with
the password variables its tokens name, a read-only tokens file, /healthz probes, non-root."""

from __future__ import annotations

import re
from typing import Any

import pytest
import yaml

from tests.support.nats_render import load_renderer

from .compose_model import ROOT, environment, load, load_raw
from .kustomize import render

PORT = 8765
SERVE = ["nexus", "mcp", "serve", "--http", "--host", "0.0.0.0", "--port", str(PORT)]
DOCKERFILE = ROOT / "deploy/docker/Dockerfile"


def _password_variables() -> dict[str, str]:
    renderer = load_renderer()
    return {user: renderer.password_variable(user) for user in renderer.CLIENTS}


# --- compose -------------------------------------------------------------------------------


def test_compose_serves_http_as_mcp_read_with_the_tokens_file() -> None:
    raw = load_raw()["services"]["mcp"]
    mcp = load()["services"]["mcp"]
    command = mcp["entrypoint"]
    assert command[: len(SERVE)] == SERVE
    tokens = command[command.index("--tokens") + 1]
    env, raw_env = environment(mcp), environment(raw)
    variables = _password_variables()
    assert env["NEXUS_NATS_USER"] == "mcp-read"
    assert raw_env["NEXUS_NATS_PASSWORD"].startswith("${" + variables["mcp-read"])
    # Every user a token may name has its password here, as nats-server has it.
    nats = environment(load()["services"]["nats"])
    for variable in variables.values():
        assert env[variable] == nats[variable]
    [mount] = [v for v in mcp["volumes"] if v.split(":")[1] == tokens]
    source, _, mode = mount.split(":")
    assert mode == "ro"
    assert source == "./mcp/tokens.yaml"
    assert load({"NEXUS_MCP_TOKENS_FILE": "/srv/t.yaml"})["services"]["mcp"]["volumes"][0] == (
        f"/srv/t.yaml:{tokens}:ro"
    )
    assert mcp["ports"] == [f"{PORT}:{PORT}"]
    assert load({"MCP_PORT": "18765"})["services"]["mcp"]["ports"] == [f"18765:{PORT}"]
    assert f"127.0.0.1:{PORT}/healthz" in " ".join(mcp["healthcheck"]["test"])
    assert mcp["read_only"] is True
    assert mcp["profiles"] == ["mcp"]
    assert mcp["depends_on"]["nats"]["condition"] == "service_healthy"


def test_the_committed_tokens_file_holds_no_token() -> None:
    data = yaml.safe_load((ROOT / "deploy/mcp/tokens.yaml").read_text())
    assert data == {"tokens": []}


def test_the_cli_image_is_non_root_and_runs_nexus() -> None:
    text = DOCKERFILE.read_text()
    assert load()["services"]["mcp"]["build"]["target"] == "cli"
    body = text.split("AS cli\n", 1)[1].split("\nFROM ", 1)[0]
    assert "USER 10001:10001" in body
    assert 'ENTRYPOINT ["nexus"]' in body
    assert "--from=build-cli " in body
    build = text.split("AS build-cli\n", 1)[1].split("\nFROM ", 1)[0]
    assert "RUN install.sh cli" in build
    install = (ROOT / "deploy/docker/install.sh").read_text()
    assert re.search(r"cli\) targets=\"\$targets \./cli\"", install)


# --- Kubernetes ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def base() -> list[dict[str, Any]]:
    return render(ROOT / "deploy/k8s/base")


def _find(objs: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    [obj] = [o for o in objs if o["kind"] == kind and o["metadata"]["name"] == name]
    return obj


def test_kubernetes_runs_the_server_with_probes_secrets_and_no_root(
    base: list[dict[str, Any]],
) -> None:
    deployment = _find(base, "Deployment", "mcp")
    pod = deployment["spec"]["template"]["spec"]
    [container] = pod["containers"]
    command = container["command"]
    assert command[: len(SERVE)] == SERVE
    assert container["image"].startswith("nexus/cli:")
    assert {p["name"]: p["containerPort"] for p in container["ports"]} == {"http": PORT}
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        assert container[probe]["httpGet"] == {"path": "/healthz", "port": "http"}, probe
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["automountServiceAccountToken"] is False
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["securityContext"]["capabilities"]["drop"] == ["ALL"]
    assert deployment["spec"]["template"]["metadata"]["labels"]["nexus.dev/nats-client"] == "true"
    # The tokens file is the Secret mcp-tokens, mounted read-only where --tokens points.
    tokens = command[command.index("--tokens") + 1]
    [mount] = [m for m in container["volumeMounts"] if tokens.startswith(m["mountPath"] + "/")]
    assert mount["readOnly"] is True
    [volume] = [v for v in pod["volumes"] if v["name"] == mount["name"]]
    secret = _find(base, "Secret", volume["secret"]["secretName"])["stringData"]
    assert yaml.safe_load(secret[tokens.rsplit("/", 1)[1]]) == {"tokens": []}
    # Its NATS identity and the passwords of the users tokens may name: its own Secret.
    refs = [e["secretRef"]["name"] for e in container["envFrom"] if "secretRef" in e]
    assert refs == ["mcp-env"]
    env = _find(base, "Secret", "mcp-env")["stringData"]
    assert env["NEXUS_NATS_USER"] == "mcp-read"
    assert set(_password_variables().values()) <= set(env)
    nats_users = _find(base, "Secret", "nats-users")["stringData"]
    assert set(_password_variables().values()) <= set(nats_users)


def test_kubernetes_serves_and_opens_only_the_http_port(base: list[dict[str, Any]]) -> None:
    service = _find(base, "Service", "mcp")
    assert service["spec"]["selector"] == {"app.kubernetes.io/name": "mcp"}
    assert [(p["name"], p["port"]) for p in service["spec"]["ports"]] == [("http", PORT)]
    opened = [
        port["port"]
        for policy in base
        if policy["kind"] == "NetworkPolicy"
        and policy["spec"]["podSelector"].get("matchLabels") == {"app.kubernetes.io/name": "mcp"}
        for rule in policy["spec"]["ingress"]
        for port in rule["ports"]
    ]
    assert opened == [PORT]


@pytest.mark.parametrize("overlay", ["dev", "prod"])
def test_the_overlays_tag_the_cli_image(overlay: str) -> None:
    objs = render(ROOT / "deploy/k8s/overlays" / overlay)
    [container] = _find(objs, "Deployment", "mcp")["spec"]["template"]["spec"]["containers"]
    assert container["image"].endswith(":dev" if overlay == "dev" else ":0.1.0")
