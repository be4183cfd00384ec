"""KubernetesRuntime against a fake API server that the real kubernetes-asyncio client talks to."""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
from kubernetes_asyncio import client
from nexus_scheduler.callout_jwt import Issuer
from nexus_scheduler.run_credentials import RunCredentialMinter, verify
from nexus_scheduler.runtime.base import AgentRuntimeError, RuntimeState
from nexus_scheduler.runtime.kubernetes import KubernetesRuntime, KubernetesSettings, job_name

from tests.fakes.kube_api import FakeKubeApi

from ..factories import config
from ..waiting import eventually

NS = "nexus-runs"


@pytest.fixture
async def fake() -> AsyncIterator[Any]:
    async with FakeKubeApi() as api:
        yield api


@pytest.fixture
async def runtime(fake: Any) -> AsyncIterator[KubernetesRuntime]:
    cfg = client.Configuration(host=fake.host)
    rt = KubernetesRuntime(
        KubernetesSettings(namespace=NS, image="runner:1", ttl_after_finished_seconds=600),
        configuration=cfg,
    )
    await rt.start()
    try:
        yield rt
    finally:
        await rt.close()


async def _true(value: bool) -> bool:
    return value


async def _state_is(runtime: KubernetesRuntime, run_id: str, state: RuntimeState) -> bool:
    return (await runtime.status(run_id)).state is state


def test_job_names_are_dns_labels_and_distinct() -> None:
    assert job_name("run-123") == "nexus-run-run-123"
    assert job_name("Run_1") != job_name("run-1")
    long = job_name("x" * 128)
    assert len(long) <= 63
    assert long != job_name("x" * 127)


async def test_start_run_creates_a_hardened_job_and_an_owned_secret(
    fake: Any, runtime: KubernetesRuntime
) -> None:
    cfg = config("run-1", agent_id="planner", task_id="task-9", wall_seconds=900)
    handle = await runtime.start_run(cfg)
    assert (handle.runtime, handle.handle) == ("kubernetes", "nexus-run-run-1")

    job = fake.job("nexus-run-run-1", NS)
    labels = job["metadata"]["labels"]
    assert labels["nexus.dev/run-id"] == "run-1"
    assert labels["nexus.dev/agent-id"] == "planner"
    assert labels["nexus.dev/task-id"] == "task-9"
    spec = job["spec"]
    assert spec["backoffLimit"] == 0
    assert spec["activeDeadlineSeconds"] == 900
    assert spec["ttlSecondsAfterFinished"] == 600
    pod = spec["template"]["spec"]
    assert pod["restartPolicy"] == "Never"
    assert pod["automountServiceAccountToken"] is False
    assert pod["securityContext"]["runAsNonRoot"] is True
    [container] = pod["containers"]
    assert container["image"] == "runner:1"
    assert container["args"] == ["--config", "/etc/nexus/config.json"]
    assert container["resources"] == {
        "requests": {"cpu": "500m", "memory": "1Gi"},
        "limits": {"cpu": "500m", "memory": "1Gi"},
    }
    sc = container["securityContext"]
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["runAsNonRoot"] is True
    assert sc["capabilities"] == {"drop": ["ALL"]}
    # NATS and LLM settings reach the pod from the runs namespace's Secret, not the Job spec.
    assert container["envFrom"] == [{"secretRef": {"name": "runner-env", "optional": False}}]
    mounts = {m["name"]: m for m in container["volumeMounts"]}
    assert mounts["config"]["readOnly"] is True
    assert mounts["workspace"]["mountPath"] == "/workspace"
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["config"]["secret"]["secretName"] == "nexus-run-run-1"
    assert "emptyDir" in volumes["workspace"]

    secret = fake.secrets[(NS, "nexus-run-run-1")]
    [owner] = secret["metadata"]["ownerReferences"]
    assert owner["kind"] == "Job"
    assert owner["uid"] == job["metadata"]["uid"]
    stored = json.loads(base64.b64decode(secret["data"]["config.json"]))
    assert stored["run_id"] == "run-1"
    assert stored["agent_id"] == "planner"


async def test_start_run_twice_adopts_the_existing_job(
    fake: Any, runtime: KubernetesRuntime
) -> None:
    cfg = config("run-2")
    first = await runtime.start_run(cfg)
    second = await runtime.start_run(cfg)
    assert first == second
    assert len(fake.requests_to("POST", "/jobs")) == 2
    assert len(fake.jobs) == 1  # the second create got 409 and adopted
    assert len(fake.secrets) == 1


async def test_a_new_runtime_re_adopts_an_existing_job(
    fake: Any, runtime: KubernetesRuntime
) -> None:
    # A restarted scheduler has an empty watch cache: it must find the Job by its name.
    await runtime.start_run(config("run-8"))
    await runtime.close()
    again = KubernetesRuntime(
        KubernetesSettings(namespace=NS, image="runner:1", ttl_after_finished_seconds=600),
        configuration=client.Configuration(host=fake.host),
    )
    await again.start()
    try:
        assert (await again.status("run-8")).live
        assert (await again.status("run-unknown")).state is RuntimeState.GONE
        await again.cancel_run("run-8")
        assert fake.jobs == {}
    finally:
        await again.close()


async def test_cancel_deletes_the_job_in_the_background(
    fake: Any, runtime: KubernetesRuntime
) -> None:
    await runtime.start_run(config("run-3"))
    await runtime.cancel_run("run-3")
    [delete] = fake.requests_to("DELETE", "/jobs/nexus-run-run-3")
    assert delete.query.get("propagationPolicy") == "Background" or (
        (delete.body or {}).get("propagationPolicy") == "Background"
    )
    assert fake.jobs == {}
    assert fake.secrets == {}  # owned secret collected with its Job
    assert (await runtime.status("run-3")).state is RuntimeState.GONE
    await runtime.cancel_run("run-3")  # already gone: no error


async def test_status_from_watch_maps_pod_failures_and_deadlines(
    fake: Any, runtime: KubernetesRuntime
) -> None:
    await eventually(lambda: _true(runtime.watch_ready.is_set()))
    for rid in ("oom", "pull", "deadline", "evicted", "ok"):
        await runtime.start_run(config(rid))
    assert (await runtime.status("ok")).state is RuntimeState.PENDING
    fake.add_pod(job_name("ok"), namespace=NS)
    await eventually(lambda: _state_is(runtime, "ok", RuntimeState.RUNNING), what="pod running")

    fake.add_pod(
        job_name("pull"),
        phase="Pending",
        namespace=NS,
        container_statuses=[
            _cs({"waiting": {"reason": "ImagePullBackOff", "message": "no such image"}})
        ],
    )
    fake.add_pod(
        job_name("oom"),
        phase="Failed",
        namespace=NS,
        container_statuses=[_cs({"terminated": {"reason": "OOMKilled", "exitCode": 137}})],
    )
    fake.set_job_status(job_name("oom"), _failed("BackoffLimitExceeded"), NS)
    fake.set_job_status(job_name("deadline"), _failed("DeadlineExceeded"), NS)
    fake.add_pod(job_name("evicted"), phase="Failed", reason="Evicted", namespace=NS)
    fake.set_job_status(job_name("evicted"), _failed("BackoffLimitExceeded"), NS)

    async def watched() -> bool:
        return all(
            runtime._statuses.get(job_name(r)) is not None
            and runtime._statuses[job_name(r)].status.conditions
            for r in ("oom", "deadline", "evicted")
        ) and all(job_name(r) in runtime._pods_by_job for r in ("oom", "pull", "evicted"))

    await eventually(watched, what="watch delivered the failures")
    reads_before = len(fake.requests_to("GET", "/jobs/"))
    lists_before = len(fake.requests_to("GET", "/pods"))
    oom = await runtime.status("oom")
    assert (oom.state, oom.reason) == (RuntimeState.FAILED, "OOMKilled")
    pull = await runtime.status("pull")
    assert (pull.state, pull.reason) == (RuntimeState.FAILED, "ImagePullBackOff")
    deadline = await runtime.status("deadline")
    assert (deadline.state, deadline.reason) == (RuntimeState.TIMED_OUT, "DeadlineExceeded")
    evicted = await runtime.status("evicted")
    assert (evicted.state, evicted.reason) == (RuntimeState.FAILED, "Evicted")
    # failures came from the watch caches, not from reading each Job or listing its pods
    assert len(fake.requests_to("GET", "/jobs/")) == reads_before
    assert len(fake.requests_to("GET", "/pods")) == lists_before


async def test_stream_logs_follows_the_pod(fake: Any, runtime: KubernetesRuntime) -> None:
    await runtime.start_run(config("run-4"))
    pod = fake.add_pod(job_name("run-4"), namespace=NS)
    await fake.append_log(pod, "hello", namespace=NS)
    lines: list[str] = []

    async def follow() -> None:
        async for line in runtime.stream_logs("run-4"):
            lines.append(line)

    task = asyncio.create_task(follow())
    await eventually(lambda: _true(lines == ["hello"]), what="first line")
    await fake.append_log(pod, "world", namespace=NS)
    await eventually(lambda: _true(lines == ["hello", "world"]), what="followed line")
    assert not task.done()
    await fake.end_log(pod, namespace=NS)
    await asyncio.wait_for(task, timeout=5)
    [req] = fake.requests_to("GET", f"/pods/{pod}/log")
    assert req.query["follow"] in ("true", "True")


def _cs(state: dict[str, Any]) -> dict[str, Any]:
    return {
        "name": "runner",
        "image": "runner:1",
        "imageID": "",
        "ready": False,
        "restartCount": 0,
        "state": state,
    }


def _failed(reason: str) -> dict[str, Any]:
    return {
        "failed": 1,
        "conditions": [
            {"type": "Failed", "status": "True", "reason": reason, "message": reason.lower()}
        ],
    }


async def test_scheduler_on_kubernetes_turns_pod_failures_into_run_events(
    fake: Any, runtime: KubernetesRuntime, make_app: Any, bus: Any, clock: Any
) -> None:
    from nexus_events.events import RunFailed, RunTimedOut

    from .conftest import publish_prepared, run_events

    app = await make_app(runtime, exit_grace_seconds=0)
    await publish_prepared(bus, [config("oom"), config("late", wall_seconds=60)])

    async def dispatched() -> list[Any] | None:
        got = await run_events(bus, "dispatched")
        return got if len(got) == 2 else None

    handles = {rid: ev.handle for rid, ev in await eventually(dispatched)}
    assert handles == {"oom": job_name("oom"), "late": job_name("late")}
    fake.add_pod(
        job_name("oom"),
        phase="Failed",
        namespace=NS,
        container_statuses=[_cs({"terminated": {"reason": "OOMKilled", "exitCode": 137}})],
    )
    fake.set_job_status(job_name("oom"), _failed("BackoffLimitExceeded"), NS)
    fake.set_job_status(job_name("late"), _failed("DeadlineExceeded"), NS)

    async def watched() -> bool:
        return (await runtime.status("late")).state is RuntimeState.TIMED_OUT

    await eventually(watched, what="the watch saw the deadline")
    await app.service.tick()
    [(_, failed)] = await run_events(bus, "failed")
    assert isinstance(failed, RunFailed)
    assert failed.reason == "runtime_error"
    assert failed.detail == {"runtime_reason": "OOMKilled"}
    [(_, timed_out)] = await run_events(bus, "timed_out")
    assert isinstance(timed_out, RunTimedOut)
    assert "DeadlineExceeded" in timed_out.message


async def test_status_of_watched_runs_asks_the_api_nothing(
    fake: Any, runtime: KubernetesRuntime
) -> None:
    """Before: every status() (each active run, every tick) listed the run's pods."""
    ids = [f"w-{i}" for i in range(5)]
    for rid in ids:
        await runtime.start_run(config(rid))
    pods = {rid: fake.add_pod(job_name(rid), namespace=NS) for rid in ids}

    async def all_running() -> bool:
        return all([await _state_is(runtime, r, RuntimeState.RUNNING) for r in ids])

    await eventually(all_running, what="every pod seen running")
    before = len(fake.requests)
    for _ in range(3):  # three ticks
        assert all([await _state_is(runtime, r, RuntimeState.RUNNING) for r in ids])
    # A pod that fails is seen through the watch too.
    fake.set_pod_status(
        pods["w-2"],
        {
            "phase": "Failed",
            "containerStatuses": [_cs({"terminated": {"reason": "OOMKilled", "exitCode": 137}})],
        },
        NS,
    )
    await eventually(lambda: _state_is(runtime, "w-2", RuntimeState.FAILED), what="pod failed")
    assert fake.requests[before:] == []


@pytest.mark.parametrize(
    ("method", "path", "call"),
    [
        ("POST", "/jobs", "start"),
        ("GET", "/jobs/nexus-run-hung", "status"),
        ("DELETE", "/jobs/nexus-run-hung", "cancel"),
    ],
)
async def test_a_hung_api_call_times_out(fake: Any, method: str, path: str, call: str) -> None:
    """Before: a request the API server never answered hung the scheduler's call forever."""
    rt = KubernetesRuntime(
        KubernetesSettings(namespace=NS, request_timeout=0.5),
        configuration=client.Configuration(host=fake.host),
    )
    await rt.start()
    try:
        fake.hang(method, path)
        calls = {
            "start": lambda: rt.start_run(config("hung")),
            "status": lambda: rt.status("hung"),
            "cancel": lambda: rt.cancel_run("hung"),
        }
        with pytest.raises(AgentRuntimeError, match=r"no answer from the Kubernetes API within"):
            await asyncio.wait_for(calls[call](), timeout=15)
        assert fake.requests_to(method, path)
    finally:
        fake.release_hung()
        await rt.close()


async def test_a_failed_pod_watch_is_re_listed_and_status_lists_meanwhile(
    fake: Any, runtime: KubernetesRuntime, caplog: pytest.LogCaptureFixture
) -> None:
    await runtime.start_run(config("re-1"))
    await eventually(lambda: _true(runtime.pods_synced.is_set()), what="pods listed")
    caplog.set_level(logging.ERROR, logger="nexus_scheduler.runtime.kubernetes")
    fake.fail_next("GET", "/pods")  # the re-list after the watch ends fails once
    fake.end_watches()
    await eventually(
        lambda: _true(any("pod watch failed" in r.getMessage() for r in caplog.records)),
        what="the failure logged",
    )
    assert not runtime.pods_synced.is_set()
    fake.add_pod(job_name("re-1"), namespace=NS)
    # Unsynced: status reads the run's pods itself rather than trusting a stale cache.
    assert (await runtime.status("re-1")).state is RuntimeState.RUNNING
    per_run = [
        r
        for r in fake.requests_to("GET", "/pods")
        if r.query.get("labelSelector") == f"batch.kubernetes.io/job-name={job_name('re-1')}"
    ]
    assert len(per_run) == 1
    await eventually(lambda: _true(runtime.pods_synced.is_set()), what="re-listed", within=10)
    assert job_name("re-1") in runtime._pods_by_job


def _secret_config(fake: Any, name: str) -> dict[str, Any]:
    secret = fake.secrets[(NS, name)]
    return json.loads(base64.b64decode(secret["data"]["config.json"]))  # type: ignore[no-any-return]


async def test_attempts_are_jobs_of_their_own_addressed_by_attempt(
    fake: Any, runtime: KubernetesRuntime
) -> None:
    cfg = config("run-a", max_attempts=2)
    await runtime.start_run(cfg)
    second = await runtime.start_run(cfg.model_copy(update={"attempt": 2}))
    assert second.handle == job_name("run-a", 2) != job_name("run-a")
    assert set(fake.jobs) == {(NS, job_name("run-a")), (NS, job_name("run-a", 2))}
    assert fake.job(job_name("run-a", 2), NS)["metadata"]["labels"]["nexus.dev/attempt"] == "2"
    assert _secret_config(fake, job_name("run-a", 2)) == {
        **_secret_config(fake, job_name("run-a")),
        "attempt": 2,
    }
    fake.add_pod(job_name("run-a", 2), namespace=NS)
    await eventually(lambda: _state_is_attempt(runtime, "run-a", 2, RuntimeState.RUNNING))
    await runtime.cancel_run("run-a", attempt=1)  # the old attempt only
    assert set(fake.jobs) == {(NS, job_name("run-a", 2))}
    assert (await runtime.status("run-a", attempt=1)).state is RuntimeState.GONE
    assert (await runtime.status("run-a", attempt=2)).state is RuntimeState.RUNNING


async def _state_is_attempt(
    runtime: KubernetesRuntime, run_id: str, attempt: int, state: RuntimeState
) -> bool:
    return (await runtime.status(run_id, attempt=attempt)).state is state


async def test_scheduler_on_kubernetes_resumes_an_evicted_run_as_a_new_job(
    fake: Any, runtime: KubernetesRuntime, make_app: Any, bus: Any, clock: Any
) -> None:
    from nexus_events.events import RunDispatched, RunResuming

    from .conftest import publish_prepared, run_events

    app = await make_app(runtime, exit_grace_seconds=0)
    cfg = config("ev", max_attempts=2)
    await publish_prepared(bus, [cfg])
    await eventually(lambda: _count(bus, "dispatched", 1), what="attempt 1 dispatched")
    fake.add_pod(
        job_name("ev"),
        phase="Failed",
        namespace=NS,
        reason="Evicted",
    )
    fake.set_job_status(job_name("ev"), _failed("BackoffLimitExceeded"), NS)
    await eventually(lambda: _state_is(runtime, "ev", RuntimeState.FAILED), what="evicted")
    await app.service.tick()

    [(_, resuming)] = await run_events(bus, "resuming")
    assert isinstance(resuming, RunResuming)
    assert (resuming.attempt, resuming.reason) == (2, "runtime_error")
    assert "Evicted" in resuming.message
    dispatched = [ev for _, ev in await run_events(bus, "dispatched")]
    assert [(d.attempt, d.handle) for d in dispatched if isinstance(d, RunDispatched)] == [
        (1, job_name("ev")),
        (2, job_name("ev", 2)),
    ]
    # the evicted attempt's Job is gone; the new one runs the same config as attempt 2
    assert set(fake.jobs) == {(NS, job_name("ev", 2))}
    assert _secret_config(fake, job_name("ev", 2)) == json.loads(
        cfg.model_copy(update={"attempt": 2}).model_dump_json()
    )
    assert await run_events(bus, "failed") == []


async def _count(bus: Any, event: str, n: int) -> bool:
    from .conftest import run_events

    return len(await run_events(bus, event)) >= n


async def test_a_run_job_carries_its_run_s_own_nats_credential(fake: Any) -> None:
    """The pod's NATS identity is the run's (from the run's Secret), not runner-env's."""
    minter = RunCredentialMinter(Issuer.generate().encode(), min_ttl=600)
    rt = KubernetesRuntime(
        KubernetesSettings(namespace=NS, image="runner:1"),
        configuration=client.Configuration(host=fake.host),
        credentials=lambda c: minter.runner_nats_env(c, time.time()),
    )
    await rt.start()
    try:
        await rt.start_run(config("run-cred"))
    finally:
        await rt.close()
    name = job_name("run-cred")
    [container] = fake.job(name, NS)["spec"]["template"]["spec"]["containers"]
    refs = {e["name"]: e["valueFrom"]["secretKeyRef"] for e in container["env"] if "valueFrom" in e}
    assert refs["NEXUS_NATS_USER"] == {"name": name, "key": "NEXUS_NATS_USER"}
    assert {"NEXUS_NATS_PASSWORD", "NEXUS_NATS_INBOX_PREFIX"} <= set(refs)
    data = fake.secrets[(NS, name)]["data"]
    assert base64.b64decode(data["NEXUS_NATS_USER"]).decode() == "run:run-cred"
    password = base64.b64decode(data["NEXUS_NATS_PASSWORD"]).decode()
    assert verify(minter.key, "run:run-cred", password, now=time.time()).run_id == "run-cred"
