"""Warm runner pods on Kubernetes (runtime.kubernetes_warm) against the fake API server and a
real NATS server; each warm pod is played by the runner's own claim code
(nexus_runner.warm_claim) listening on its slot's subject."""

from __future__ import annotations

import asyncio
import base64
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import pytest
from kubernetes_asyncio import client
from nats.aio.client import Client
from nexus_events.transport.connect import BusSettings, connect
from nexus_runner.warm_claim import SlotClaim, listen
from nexus_scheduler.callout_jwt import Issuer
from nexus_scheduler.run_credentials import RunCredentialMinter, verify_slot
from nexus_scheduler.runtime.base import RuntimeState
from nexus_scheduler.runtime.kubernetes import KubernetesRuntime, KubernetesSettings, job_name
from nexus_scheduler.runtime.kubernetes_warm import (
    SERVES_LABEL,
    WARM_SLOT_LABEL,
    nats_sender,
)

from tests.fakes.kube_api import FakeKubeApi

from ..factories import config
from ..waiting import eventually

NS = "nexus-runs"
SEED = Issuer.generate()


class Pods:
    """The warm pods of the fake cluster: each warm Job gets a listener on its slot (unless
    the test silences the pod), with the claim the runner keeps."""

    def __init__(self, fake: Any, nats_url: str) -> None:
        self.fake = fake
        self.nats_url = nats_url
        self.claims: dict[str, SlotClaim] = {}
        self.silent = False
        self._conns: list[Client] = []
        self._task: asyncio.Task[None] | None = None
        self._stopping = False

    def warm_jobs(self, *, idle: bool | None = None) -> list[dict[str, Any]]:
        jobs = [
            j for (ns, _), j in self.fake.jobs.items()
            if ns == NS and WARM_SLOT_LABEL in j["metadata"]["labels"]
        ]  # fmt: skip
        if idle is None:
            return jobs
        return [j for j in jobs if (SERVES_LABEL not in j["metadata"]["labels"]) == idle]

    async def _run(self) -> None:
        # Checked each round, not only cancelled: nats-py's connect may swallow a
        # cancellation that lands inside it, and the loop would then go on for ever.
        while not self._stopping:
            for job in self.warm_jobs():
                slot = job["metadata"]["labels"][WARM_SLOT_LABEL]
                if slot not in self.claims and not self.silent:
                    nc = Client()
                    self._conns.append(nc)  # before connecting: closed even if cancelled
                    await nc.connect(servers=[self.nats_url], allow_reconnect=False)
                    claim = SlotClaim()
                    await listen(nc, slot, claim)
                    # Counted once it listens (subscribed and flushed): a pod counted before
                    # got "no responders" to its hand-off in a loaded full run.
                    self.claims[slot] = claim
            await asyncio.sleep(0.02)

    async def __aenter__(self) -> Pods:
        self._task = asyncio.create_task(self._run())
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._stopping = True
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        for nc in self._conns:
            with contextlib.suppress(Exception):
                await nc.close()


@pytest.fixture
async def fake() -> AsyncIterator[Any]:
    async with FakeKubeApi() as api:
        yield api


@pytest.fixture
async def scheduler_nc(nats_url: str) -> AsyncIterator[Client]:
    nc = await connect(BusSettings(url=nats_url))
    yield nc
    await nc.close()


@pytest.fixture
async def pods(fake: Any, nats_url: str) -> AsyncIterator[Pods]:
    async with Pods(fake, nats_url) as p:
        yield p


def _runtime(fake: Any, nc: Client, sizes: dict[str, int]) -> KubernetesRuntime:
    minter = RunCredentialMinter(Issuer(SEED).seed, min_ttl=60)
    return KubernetesRuntime(
        KubernetesSettings(namespace=NS, image="runner:1", ttl_after_finished_seconds=600),
        configuration=client.Configuration(host=fake.host),
        credentials=lambda c: minter.runner_nats_env(c, 1e9),
        warm_pool=sizes,
        slot_credentials=lambda slot: minter.slot_nats_env(slot, 1e9, 10**10),
        handoff=nats_sender(nc.request),
    )


@pytest.fixture
async def runtime(fake: Any, scheduler_nc: Client) -> AsyncIterator[KubernetesRuntime]:
    rt = _runtime(fake, scheduler_nc, {"default": 2})
    await rt.start()
    yield rt
    await rt.close()


async def _count(pods: Pods, n: int) -> bool:
    """`n` idle warm Jobs, each with its pod listening (the claims of earlier, claimed pods
    do not count: a check on their number let a hand-off reach a pod not yet listening)."""
    idle = pods.warm_jobs(idle=True)
    slots = {j["metadata"]["labels"][WARM_SLOT_LABEL] for j in idle}
    return len(idle) == n and slots <= pods.claims.keys()


async def test_an_empty_pool_starts_cold_then_fills_with_the_agent_s_pod(
    fake: Any, runtime: KubernetesRuntime, pods: Pods
) -> None:
    handle = await runtime.start_run(config("run-1", agent_id="planner"))
    assert handle.handle == job_name("run-1")  # cold: the pool had nothing yet
    await eventually(lambda: _count(pods, 2), what="two warm Jobs")
    job = pods.warm_jobs()[0]
    labels = job["metadata"]["labels"]
    assert labels["nexus.dev/agent-id"] == "planner"
    assert "nexus.dev/run-id" not in labels
    pod = job["spec"]["template"]["spec"]
    [container] = pod["containers"]
    assert container["args"] == ["--warm-claim"]
    assert container["image"] == "runner:1"
    assert "activeDeadlineSeconds" not in job["spec"]
    assert "config" not in {v["name"] for v in pod["volumes"]}
    env = {e["name"]: e for e in container["env"]}
    slot = labels[WARM_SLOT_LABEL]
    assert env["NEXUS_WARM_SLOT"]["value"] == slot
    assert "NEXUS_RUN_ID" not in env
    # The slot credential (and nothing of any run) in the Job's own Secret.
    secret = fake.secrets[(NS, job["metadata"]["name"])]
    data = {k: base64.b64decode(v).decode() for k, v in secret["data"].items()}
    assert "config.json" not in data
    key = RunCredentialMinter(Issuer(SEED).seed, min_ttl=60).key
    cred = verify_slot(key, data["NEXUS_NATS_USER"], data["NEXUS_NATS_PASSWORD"], now=1e9 + 1)
    assert cred.slot == slot


async def test_a_run_is_claimed_by_one_warm_pod_which_serves_it_alone(
    fake: Any, runtime: KubernetesRuntime, pods: Pods
) -> None:
    await runtime.start_run(config("run-0"))
    await eventually(lambda: _count(pods, 2), what="two warm Jobs")
    handle = await runtime.start_run(config("run-1"))
    assert handle.handle.startswith("nexus-warm-")
    job = fake.job(handle.handle, NS)
    assert job["metadata"]["labels"][SERVES_LABEL] == job_name("run-1")
    assert job["metadata"]["labels"]["nexus.dev/run-id"] == "run-1"
    assert job["spec"]["activeDeadlineSeconds"] >= 3600
    claim = pods.claims[job["metadata"]["labels"][WARM_SLOT_LABEL]]
    assert claim.handoff is not None
    assert claim.handoff.config.run_id == "run-1"
    # The run's own credential travels in the hand-off, not in the pod's spec.
    assert claim.handoff.env["NEXUS_NATS_USER"] == "run:run-1"
    assert claim.handoff.env["NEXUS_RUN_ID"] == "run-1"
    # No cold Job for it; starting it again adopts the warm one.
    assert (NS, job_name("run-1")) not in fake.jobs
    assert await runtime.start_run(config("run-1")) == handle
    # Status and cancel address the warm Job.
    fake.add_pod(handle.handle, phase="Running", namespace=NS)
    await eventually(
        lambda: _state(runtime, "run-1", RuntimeState.RUNNING), what="running from warm Job"
    )
    await runtime.cancel_run("run-1")
    assert (NS, handle.handle) not in fake.jobs
    # The pool is refilled after the claim.
    await eventually(lambda: _count(pods, 2), what="the pool refilled")


async def _state(runtime: KubernetesRuntime, run_id: str, state: RuntimeState) -> bool:
    return (await runtime.status(run_id)).state is state


async def test_many_runs_on_a_pool_of_two_never_share_a_pod(
    fake: Any, runtime: KubernetesRuntime, pods: Pods
) -> None:
    await runtime.start_run(config("run-0"))
    warm: list[str] = []
    for i in range(1, 9):
        await eventually(lambda: _count(pods, 2), what="the pool refilled")
        handle = await runtime.start_run(config(f"run-{i}"))
        assert handle.warm  # what `dispatched` says of it
        warm.append(handle.handle)
    assert len(set(warm)) == 8  # every run its own pod
    served = [c.handoff.config.run_id for c in pods.claims.values() if c.handoff is not None]
    assert sorted(served) == sorted(f"run-{i}" for i in range(1, 9))  # each run claimed once


async def test_a_pod_that_does_not_answer_is_deleted_and_the_run_starts_cold(
    fake: Any, runtime: KubernetesRuntime, pods: Pods
) -> None:
    pods.silent = True
    await runtime.start_run(config("run-0"))
    await eventually(lambda: _true(len(pods.warm_jobs(idle=True)) == 2), what="warm Jobs")
    silent = {j["metadata"]["name"] for j in pods.warm_jobs()}
    handle = await runtime.start_run(config("run-1"))
    assert handle.handle == job_name("run-1")
    assert not handle.warm
    assert len(silent - {name for (_, name) in fake.jobs}) == 1  # the one handed is gone


async def test_a_job_labelled_by_another_scheduler_first_is_left_to_it(
    fake: Any, runtime: KubernetesRuntime, pods: Pods
) -> None:
    await runtime.start_run(config("run-0"))
    await eventually(lambda: _count(pods, 2), what="two warm Jobs")
    for job in pods.warm_jobs():  # each changes after this scheduler saw it idle
        fake.set_job_status(job["metadata"]["name"], {"active": 1}, NS)
    handle = await runtime.start_run(config("run-1"))
    assert handle.handle == job_name("run-1")
    assert all(c.handoff is None for c in pods.claims.values())  # none was handed anything


async def test_an_idle_pod_that_dies_is_replaced_and_is_no_run_s(
    fake: Any, runtime: KubernetesRuntime, pods: Pods
) -> None:
    await runtime.start_run(config("run-0"))
    await eventually(lambda: _count(pods, 2), what="two warm Jobs")
    dead = pods.warm_jobs()[0]["metadata"]["name"]
    fake.set_job_status(
        dead, {"conditions": [{"type": "Failed", "status": "True", "reason": "x"}]}, NS
    )
    await eventually(
        lambda: _true((NS, dead) not in fake.jobs and len(pods.warm_jobs(idle=True)) == 2),
        what="the dead warm Job replaced",
    )
    assert SERVES_LABEL not in str(fake.requests_to("PATCH", dead))


async def _true(value: bool) -> bool:
    return value


async def test_a_restarted_scheduler_adopts_claimed_pods_and_discards_idle_ones(
    fake: Any, scheduler_nc: Client, pods: Pods
) -> None:
    first = _runtime(fake, scheduler_nc, {"default": 2})
    await first.start()
    await first.start_run(config("run-0"))
    await eventually(lambda: _count(pods, 2), what="two warm Jobs")
    handle = await first.start_run(config("run-1"))
    await eventually(lambda: _count(pods, 2), what="refilled")
    idle = {j["metadata"]["name"] for j in pods.warm_jobs(idle=True)}
    # A crash: the runtime's watches stop, nothing is cleaned up.
    for task in first._watch_tasks:
        task.cancel()
    second = _runtime(fake, scheduler_nc, {"default": 2})
    await second.start()
    try:
        assert not idle & {name for (_, name) in fake.jobs}  # the idle ones discarded
        assert (NS, handle.handle) in fake.jobs  # the claimed one kept
        assert await second.start_run(config("run-1")) == handle
        fake.add_pod(handle.handle, phase="Running", namespace=NS)
        await eventually(lambda: _state(second, "run-1", RuntimeState.RUNNING), what="adopted")
    finally:
        await second.close()
        first.warm.idle.clear()
        await first.close()


async def test_a_scheduler_that_died_between_label_and_hand_off_is_made_good_on_restart(
    fake: Any, scheduler_nc: Client, pods: Pods
) -> None:
    first = _runtime(fake, scheduler_nc, {"default": 1})
    await first.start()
    await first.start_run(config("run-0"))
    await eventually(lambda: _count(pods, 1), what="a warm Job")
    [pod] = first.warm.idle["implementer"]
    assert await first.warm._label(pod, config("run-1"))  # labelled, then the crash
    for task in first._watch_tasks:
        task.cancel()
    first.warm.idle.clear()
    second = _runtime(fake, scheduler_nc, {"default": 1})
    await second.start()
    try:
        await eventually(lambda: _true(pod.job in second._statuses), what="watched")
        handle = await second.start_run(config("run-1"))
        assert handle.handle == pod.job
        claim = pods.claims[pod.slot]
        assert claim.handoff is not None
        assert claim.handoff.config.run_id == "run-1"
    finally:
        await second.close()
        await first.close()


async def test_concurrent_refills_never_overfill_the_pool(
    fake: Any, runtime: KubernetesRuntime, pods: Pods
) -> None:
    await runtime.start_run(config("run-0"))  # teaches the agent's pod; a refill starts
    # More refills at once, as a start and idle deaths each ask for one: each counts the
    # Jobs the others are still creating.
    await asyncio.gather(*(runtime.warm.refill("implementer") for _ in range(3)))
    await eventually(lambda: _count(pods, 2), what="two warm Jobs")
    assert len(pods.warm_jobs()) == 2
