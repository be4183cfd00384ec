"""deploy/k8s: every object of the base and of each rendered overlay is valid against the
Kubernetes OpenAPI schemas (offline, kubernetes-validate), and the RBAC is least privilege."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from .kustomize import render

ROOT = Path(__file__).resolve().parents[2]
K8S = ROOT / "deploy/k8s"
TARGETS = ["base", "overlays/dev", "overlays/prod"]
# The newest schema set the kubernetes-validate wheel ships.
K8S_VERSION = kubernetes_validate.latest_version()
SCHEDULER_RULES = {
    ("batch", "jobs"): {"create", "get", "list", "watch", "patch", "delete"},
    ("", "secrets"): {"create", "get", "delete"},
    ("", "pods"): {"get", "list", "watch"},
    ("", "pods/log"): {"get"},
}
RUNS_NAMESPACE = "nexus-runs"


def _name(obj: dict[str, Any]) -> str:
    meta = obj.get("metadata", {})
    return f"{obj.get('kind')}/{meta.get('namespace', '-')}/{meta.get('name')}"


@pytest.fixture(scope="module", params=TARGETS)
def rendered(request: pytest.FixtureRequest) -> list[dict[str, Any]]:
    return render(K8S / request.param)


def test_every_object_is_valid_against_the_openapi_schemas(rendered: list[dict[str, Any]]) -> None:
    errors = []
    for obj in rendered:
        try:
            kubernetes_validate.validate(obj, K8S_VERSION, strict=True)
        except kubernetes_validate.ValidationError as exc:
            errors.append(f"{_name(obj)}: {exc.message} at {list(exc.path)}")
    assert not errors, "\n".join(errors)


def test_every_object_is_namespaced_explicitly(rendered: list[dict[str, Any]]) -> None:
    cluster_scoped = {"Namespace"}
    missing = [
        _name(o)
        for o in rendered
        if o["kind"] not in cluster_scoped and not o["metadata"].get("namespace")
    ]
    assert not missing


def test_rbac_is_least_privilege(rendered: list[dict[str, Any]]) -> None:
    kinds = {o["kind"] for o in rendered}
    assert not kinds & {"ClusterRole", "ClusterRoleBinding"}, "no cluster-wide rights"
    roles = [o for o in rendered if o["kind"] == "Role"]
    assert roles, "the scheduler needs its Role"
    for role in roles:
        for rule in role["rules"]:
            for field in ("verbs", "resources", "apiGroups"):
                assert "*" not in rule.get(field, []), f"{_name(role)}: wildcard in {field}"
            assert not rule.get("resourceNames") or "*" not in rule["resourceNames"]
    [scheduler_role] = [r for r in roles if r["metadata"]["name"] == "nexus-scheduler"]
    assert scheduler_role["metadata"]["namespace"] == RUNS_NAMESPACE
    granted: dict[tuple[str, str], set[str]] = {}
    for rule in scheduler_role["rules"]:
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                granted.setdefault((group, resource), set()).update(rule["verbs"])
    assert set(granted) <= set(SCHEDULER_RULES), (
        f"extra resources: {set(granted) - set(SCHEDULER_RULES)}"
    )
    for key, verbs in granted.items():
        assert verbs <= SCHEDULER_RULES[key], f"{key}: extra verbs {verbs - SCHEDULER_RULES[key]}"
    for binding in (o for o in rendered if o["kind"] == "RoleBinding"):
        assert binding["metadata"]["namespace"] == RUNS_NAMESPACE
        assert binding["roleRef"]["kind"] == "Role"


def test_workloads_have_probes_resources_and_run_as_non_root(
    rendered: list[dict[str, Any]],
) -> None:
    workloads = [o for o in rendered if o["kind"] in ("Deployment", "StatefulSet")]
    assert {o["metadata"]["name"] for o in workloads} >= {"core", "scheduler", "nats"}
    for w in workloads:
        pod = w["spec"]["template"]["spec"]
        assert pod["securityContext"]["runAsNonRoot"] is True, _name(w)
        for c in pod["containers"]:
            assert c.get("livenessProbe"), f"{_name(w)}: no liveness probe"
            assert c["resources"]["requests"]
            assert c["resources"]["limits"]["memory"]
            assert c["securityContext"]["allowPrivilegeEscalation"] is False
            assert c["securityContext"]["readOnlyRootFilesystem"] is True
        # Every workload has a PodDisruptionBudget selecting it.
        labels = w["spec"]["template"]["metadata"]["labels"]
        pdbs = [
            p
            for p in rendered
            if p["kind"] == "PodDisruptionBudget"
            and p["spec"]["selector"]["matchLabels"].items() <= labels.items()
        ]
        assert pdbs, f"{_name(w)}: no PodDisruptionBudget"


def test_hpas_target_only_stateless_deployments(rendered: list[dict[str, Any]]) -> None:
    # Core (projection runners) and the scheduler (one lease holder) must not scale out.
    singletons = {"core", "scheduler", "nats"}
    for hpa in (o for o in rendered if o["kind"] == "HorizontalPodAutoscaler"):
        assert hpa["spec"]["scaleTargetRef"]["name"] not in singletons


def test_runner_pods_may_reach_only_dns_nats_otlp_llm_and_git(
    rendered: list[dict[str, Any]],
) -> None:
    [policy] = [o for o in rendered if o["metadata"]["name"] == "runner-egress"]
    assert policy["metadata"]["namespace"] == RUNS_NAMESPACE
    assert policy["spec"]["podSelector"]["matchLabels"] == {
        "app.kubernetes.io/managed-by": "nexus-scheduler"  # KubernetesRuntime's Job label
    }
    assert set(policy["spec"]["policyTypes"]) == {"Ingress", "Egress"}
    assert policy["spec"]["ingress"] == []
    ports = sorted(p["port"] for rule in policy["spec"]["egress"] for p in rule["ports"])
    assert ports == [22, 53, 53, 443, 443, 4222, 4318]
    for rule in policy["spec"]["egress"]:
        assert rule.get("to"), "an egress rule without `to` would allow every destination"


def test_runner_pods_send_spans_where_the_services_do(rendered: list[dict[str, Any]]) -> None:
    [config] = [o for o in rendered if o["metadata"]["name"] == "nexus-config"]
    [secret] = [o for o in rendered if o["metadata"]["name"] == "runner-env"]
    endpoint = secret["stringData"]["OTEL_EXPORTER_OTLP_ENDPOINT"]
    assert endpoint == config["data"]["OTEL_EXPORTER_OTLP_ENDPOINT"]
    assert endpoint.endswith(".observability.svc:4318")  # what runner-egress lets through
    assert secret["stringData"]["OTEL_SERVICE_NAME"] == "nexus-runner"


def test_the_runtime_labels_match_the_network_policy() -> None:
    from nexus_scheduler.runtime import kubernetes as runtime

    assert (runtime.MANAGED_BY, runtime.MANAGER) == (
        "app.kubernetes.io/managed-by",
        "nexus-scheduler",
    )
    assert runtime.RUNNER_UID == 10001  # deploy/docker/Dockerfile's nexus user


def test_nats_config_in_k8s_is_the_rendered_one() -> None:
    [cm] = [o for o in render(K8S / "base") if o["metadata"]["name"] == "nats-config"]
    assert cm["data"]["nats.conf"] == (ROOT / "deploy/nats/nats.conf").read_text()


def test_the_runs_namespace_denies_by_default(rendered: list[dict[str, Any]]) -> None:
    [deny] = [o for o in rendered if o["metadata"]["name"] == "runs-default-deny"]
    assert deny["metadata"]["namespace"] == RUNS_NAMESPACE
    assert deny["spec"]["podSelector"] == {}  # every pod of the namespace
    assert set(deny["spec"]["policyTypes"]) == {"Ingress", "Egress"}
    assert "ingress" not in deny["spec"]
    assert "egress" not in deny["spec"]


async def _run_job(runtime_class: str | None) -> dict[str, Any]:
    from kubernetes_asyncio.client import ApiClient
    from nexus_events.events import RunConfig
    from nexus_scheduler.runtime.kubernetes_jobs import KubernetesSettings, build_job

    config = RunConfig.model_validate(
        {
            "run_id": "r1",
            "agent_id": "a",
            "system_prompt": "s",
            "input": "i",
            "model": {"name": "m"},
        }
    )
    settings = KubernetesSettings(namespace=RUNS_NAMESPACE, runtime_class=runtime_class)
    async with ApiClient() as api:
        job: dict[str, Any] = api.sanitize_for_serialization(build_job(config, settings))
    job["metadata"]["namespace"] = RUNS_NAMESPACE  # the runtime creates it there
    return job


async def test_a_run_job_is_valid_locked_down_and_under_the_egress_policy() -> None:
    job = await _run_job("gvisor")
    kubernetes_validate.validate(job, K8S_VERSION, strict=True)
    pod = job["spec"]["template"]["spec"]
    assert pod["runtimeClassName"] == "gvisor"
    assert pod["automountServiceAccountToken"] is False
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    [container] = pod["containers"]
    assert container["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
        "privileged": False,
        "readOnlyRootFilesystem": True,
        "runAsNonRoot": True,
        "runAsUser": 10001,
    }
    [policy] = [o for o in render(K8S / "base") if o["metadata"]["name"] == "runner-egress"]
    labels = job["spec"]["template"]["metadata"]["labels"]
    assert policy["spec"]["podSelector"]["matchLabels"].items() <= labels.items()
    assert "runtimeClassName" not in (await _run_job(None))["spec"]["template"]["spec"]


def test_the_optional_gvisor_runtime_class_is_valid() -> None:
    [runtime_class] = yaml.safe_load_all((K8S / "extras/gvisor-runtimeclass.yaml").read_text())
    kubernetes_validate.validate(runtime_class, K8S_VERSION, strict=True)
    assert runtime_class["handler"] == "runsc"
