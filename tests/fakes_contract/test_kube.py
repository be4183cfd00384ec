"""The fake Kubernetes API against kubernetes-asyncio: every body it sends deserializes into
the client's model (``V1Job``, ``V1Pod``, ``V1Secret``, ``V1Status``, the lists) with no key
the model's ``attribute_map`` lacks, and it behaves like the API server where Nexus depends on
it: a DELETE answers a ``Status`` (Success, details), dependents go only with a propagation
policy, errors are ``Status`` bodies with details, a list has a resourceVersion and a watch
from it sends only what changed since."""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from kubernetes_asyncio import client, watch
from kubernetes_asyncio.client.exceptions import ApiException

from tests.fakes.kube_api import FakeKubeApi

NS = "runs"
_MODELS = client.models
_LIST = re.compile(r"list\[(.+)\]")


def unknown_keys(data: Any, kind: str, path: str = "") -> list[str]:
    """Keys of `data` that kubernetes-asyncio's `kind` model (and its nested models) lack."""
    model = getattr(_MODELS, kind, None)
    if model is None or not isinstance(data, dict):
        return []
    by_json = {wire: attr for attr, wire in model.attribute_map.items()}
    found = []
    for key, value in data.items():
        if key not in by_json:
            found.append(f"{path}{key}")
            continue
        kind_of = model.openapi_types[by_json[key]]
        inner = _LIST.fullmatch(kind_of)
        if inner and isinstance(value, list):
            for i, item in enumerate(value):
                found += unknown_keys(item, inner.group(1), f"{path}{key}.{i}.")
        else:
            found += unknown_keys(value, kind_of, f"{path}{key}.")
    return found


def job(name: str) -> client.V1Job:
    container = client.V1Container(name="runner", image="runner:1")
    template = client.V1PodTemplateSpec(
        metadata=client.V1ObjectMeta(labels={"app": "nexus"}),
        spec=client.V1PodSpec(containers=[container], restart_policy="Never"),
    )
    return client.V1Job(
        api_version="batch/v1", kind="Job",
        metadata=client.V1ObjectMeta(name=name, labels={"app": "nexus"}),
        spec=client.V1JobSpec(template=template, backoff_limit=0),
    )  # fmt: skip


@pytest.fixture
async def kube() -> AsyncIterator[tuple[FakeKubeApi, client.ApiClient]]:
    async with FakeKubeApi() as fake, client.ApiClient(client.Configuration(host=fake.host)) as api:
        yield fake, api


async def _raw(fake: FakeKubeApi, method: str, path: str, body: Any = None) -> tuple[int, Any]:
    async with (
        aiohttp.ClientSession() as session,
        session.request(method, f"{fake.host}{path}", json=body) as resp,
    ):
        return resp.status, json.loads(await resp.read())


async def test_a_created_job_is_a_v1_job_with_the_servers_defaults(
    kube: tuple[FakeKubeApi, client.ApiClient],
) -> None:
    fake, api = kube
    status, body = await _raw(
        fake,
        "POST",
        f"/apis/batch/v1/namespaces/{NS}/jobs",
        api.sanitize_for_serialization(job("j1")),
    )
    assert status == 201
    assert unknown_keys(body, "V1Job") == []
    meta, spec = body["metadata"], body["spec"]
    assert {"uid", "resourceVersion", "creationTimestamp", "generation"} <= set(meta)
    # What the API server fills in (kept where the client set it: backoffLimit 0).
    assert (spec["backoffLimit"], spec["completions"], spec["parallelism"]) == (0, 1, 1)
    assert (spec["completionMode"], spec["suspend"]) == ("NonIndexed", False)
    uid = meta["uid"]
    assert spec["selector"] == {"matchLabels": {"batch.kubernetes.io/controller-uid": uid}}
    labels = spec["template"]["metadata"]["labels"]
    assert labels["batch.kubernetes.io/job-name"] == labels["job-name"] == "j1"
    assert labels["batch.kubernetes.io/controller-uid"] == uid
    assert labels["app"] == "nexus"
    # The job's pod: owned by it, labelled by its template.
    pod_name = fake.add_pod("j1", namespace=NS)
    pod = fake.pods[(NS, pod_name)]
    assert unknown_keys(pod, "V1Pod") == []
    [owner] = pod["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["uid"], owner["controller"]) == ("Job", uid, True)
    assert pod["metadata"]["labels"]["batch.kubernetes.io/controller-uid"] == uid
    status, listed = await _raw(fake, "GET", f"/api/v1/namespaces/{NS}/pods")
    assert unknown_keys(listed, "V1PodList") == []
    assert listed["metadata"]["resourceVersion"]
    status, jobs = await _raw(fake, "GET", f"/apis/batch/v1/namespaces/{NS}/jobs")
    assert unknown_keys(jobs, "V1JobList") == []
    assert jobs["metadata"]["resourceVersion"]


async def test_errors_are_status_bodies_with_details(
    kube: tuple[FakeKubeApi, client.ApiClient],
) -> None:
    _fake, api = kube
    batch = client.BatchV1Api(api)
    await batch.create_namespaced_job(NS, job("j1"))
    with pytest.raises(ApiException) as exists:
        await batch.create_namespaced_job(NS, job("j1"))
    with pytest.raises(ApiException) as absent:
        await batch.read_namespaced_job("nope", NS)
    for exc, code, reason, verb in ((exists, 409, "AlreadyExists", "already exists"),
                                    (absent, 404, "NotFound", "not found")):  # fmt: skip
        body = json.loads(exc.value.body or b"{}")
        assert unknown_keys(body, "V1Status") == []
        assert (exc.value.status, body["code"], body["reason"]) == (code, code, reason)
        assert body["details"]["group"] == "batch"
        assert body["details"]["kind"] == "jobs"
        assert body["message"] == f'jobs.batch "{body["details"]["name"]}" {verb}'


async def test_delete_answers_a_status_and_collects_dependents_only_when_asked(
    kube: tuple[FakeKubeApi, client.ApiClient],
) -> None:
    fake, api = kube
    batch, core = client.BatchV1Api(api), client.CoreV1Api(api)
    for name in ("kept", "gone"):
        created = await batch.create_namespaced_job(NS, job(name))
        owner = client.V1OwnerReference(
            api_version="batch/v1", kind="Job", name=name, uid=created.metadata.uid
        )
        secret = client.V1Secret(
            metadata=client.V1ObjectMeta(name=name, owner_references=[owner]),
            string_data={"k": "v"},
        )
        await core.create_namespaced_secret(NS, secret)
        fake.add_pod(name, namespace=NS)
    # No propagation policy: batch/v1 orphans a Job's dependents.
    status, orphaning = await _raw(fake, "DELETE", f"/apis/batch/v1/namespaces/{NS}/jobs/kept")
    assert status == 200
    assert unknown_keys(orphaning, "V1Status") == []
    assert (NS, "kept") in fake.secrets
    assert [p for p in fake.pods.values() if p["metadata"]["labels"]["job-name"] == "kept"]
    answer = await batch.delete_namespaced_job("gone", NS, propagation_policy="Background")
    assert isinstance(answer, client.V1Status)
    assert answer.status == "Success"
    assert answer.kind == "Status"
    assert (answer.details.name, answer.details.group, answer.details.kind) == (
        "gone",
        "batch",
        "jobs",
    )
    assert answer.details.uid
    assert (NS, "gone") not in fake.secrets
    assert not [p for p in fake.pods.values() if p["metadata"]["labels"]["job-name"] == "gone"]


async def test_a_watch_from_a_lists_resource_version_sends_only_later_changes(
    kube: tuple[FakeKubeApi, client.ApiClient],
) -> None:
    fake, api = kube
    core = client.CoreV1Api(api)
    await client.BatchV1Api(api).create_namespaced_job(NS, job("j1"))
    before = fake.add_pod("j1", namespace=NS)
    listed = await core.list_namespaced_pod(NS)
    assert [p.metadata.name for p in listed.items] == [before]
    after = fake.add_pod("j1", namespace=NS)
    fake.set_pod_status(before, {"phase": "Succeeded"}, namespace=NS)
    seen: list[tuple[str, str]] = []
    async with watch.Watch() as w:
        stream = w.stream(
            core.list_namespaced_pod, NS,
            resource_version=listed.metadata.resource_version, timeout_seconds=1,
        )  # fmt: skip
        async for event in stream:
            assert isinstance(event["object"], client.V1Pod)
            seen.append((event["type"], event["object"].metadata.name))
            if len(seen) == 2:
                break
    assert seen == [("ADDED", after), ("MODIFIED", before)]
    # Without a resourceVersion a watch starts with every current object as ADDED.
    async with watch.Watch() as w:
        first = [e async for e in w.stream(core.list_namespaced_pod, NS, timeout_seconds=1)]
    assert sorted((e["type"], e["object"].metadata.name) for e in first) == sorted(
        [("ADDED", before), ("ADDED", after)]
    )


async def test_a_job_patch_merges_and_a_stale_resource_version_is_a_conflict(
    kube: tuple[FakeKubeApi, client.ApiClient],
) -> None:
    # As the API server does for a merge patch (RFC 7386) through the official client's
    # patch_namespaced_job, with metadata.resourceVersion as an optimistic-concurrency
    # precondition (Kubernetes API conventions, "Concurrency Control and Consistency").
    _fake, api = kube
    batch = client.BatchV1Api(api)
    created = await batch.create_namespaced_job(NS, job("j1"))
    seen = created.metadata.resource_version
    patched = await batch.patch_namespaced_job(
        "j1", NS, {"metadata": {"labels": {"serves": "r1"}, "resourceVersion": seen}}
    )
    assert patched.metadata.labels == {"app": "nexus", "serves": "r1"}  # merged, not replaced
    assert patched.metadata.resource_version != seen
    with pytest.raises(ApiException) as stale:
        await batch.patch_namespaced_job(
            "j1", NS, {"metadata": {"labels": {"serves": "r2"}, "resourceVersion": seen}}
        )
    assert stale.value.status == 409
    assert json.loads(stale.value.body)["reason"] == "Conflict"
    unlabelled = await batch.patch_namespaced_job(
        "j1", NS, {"metadata": {"labels": {"serves": None}}}
    )
    assert unlabelled.metadata.labels == {"app": "nexus"}  # null deletes
