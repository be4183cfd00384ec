"""Warm runner pods on Kubernetes (docs/warm-starts.md): idle Jobs per agent, each one pod
waiting with a slot credential, and the claim that hands one of them a run over NATS.

A warm Job is a run Job's manifest for the agent's last run (`build_warm_job`) that runs
``--warm-claim`` instead of ``--config``: no run labels, no config Secret; its own Secret
holds the slot credential. The claim (`WarmPods.claim`) labels the Job with the run's Job
name FIRST, with the Job's resourceVersion as a precondition (two schedulers cannot both label
one Job), then sends the hand-off; the pod accepts only its first (`nexus_runner.warm_claim`).
So a restarted scheduler finds which Job serves which attempt from the labels (status, cancel
and logs address that Job), and a Job that did not accept is deleted and the run starts cold.
"""

from __future__ import annotations

import logging
import secrets
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException
from nexus_events.contract import subjects
from nexus_events.events import RunConfig
from nexus_events.events.warm import WarmClaim, WarmClaimStatus, WarmHandoff

from nexus_scheduler.runtime.kubernetes_jobs import (
    AGENT_LABEL,
    ATTEMPT_LABEL,
    MANAGED_BY,
    MANAGER,
    RUN_LABEL,
    KubernetesSettings,
    _label_value,
    build_job,
    job_name,
    owned_secret,
)

log = logging.getLogger(__name__)

WARM_SLOT_LABEL = "nexus.dev/warm-slot"
# The Job name of the run attempt a claimed warm Job serves (a DNS label, so a label value).
SERVES_LABEL = "nexus.dev/serves"
SLOT_VARIABLE = "NEXUS_WARM_SLOT"
# How long a hand-off waits for the pod's answer before the run starts cold.
HANDOFF_TIMEOUT_SECONDS = 2.0

# (image, cpu, memory): a run whose pod would differ from the pool's starts cold.
PodShape = tuple[str, str, str]


def pod_shape(config: RunConfig, settings: KubernetesSettings) -> PodShape:
    runtime = config.runtime
    return (runtime.image or settings.image, runtime.cpu, runtime.memory)


def warm_job_name(slot: str) -> str:
    return f"nexus-warm-{slot}"


def build_warm_job(
    template: RunConfig,
    slot: str,
    settings: KubernetesSettings,
    credential_names: list[str],
) -> client.V1Job:
    """The warm Job of `slot`: `template`'s run Job (same pod: image, resources, security)
    running ``--warm-claim``, labelled with its slot and agent, no run, no config volume, no
    deadline until a claim sets the run's; its NATS credential (the slot's) from its own
    Secret."""
    job = build_job(template, settings, {}, credential_names)
    name = warm_job_name(slot)
    labels = {
        MANAGED_BY: MANAGER,
        WARM_SLOT_LABEL: slot,
        AGENT_LABEL: _label_value(template.agent_id),
    }
    job.metadata = client.V1ObjectMeta(name=name, labels=labels)
    job.spec.active_deadline_seconds = None  # type: ignore[assignment]  # the model allows it
    job.spec.template.metadata = client.V1ObjectMeta(labels=dict(labels))
    pod = job.spec.template.spec
    [container] = pod.containers
    container.args = ["--warm-claim"]
    container.env = [
        client.V1EnvVar(name="HOME", value="/workspace"),
        client.V1EnvVar(name=SLOT_VARIABLE, value=slot),
        *(
            client.V1EnvVar(
                name=k,
                value_from=client.V1EnvVarSource(
                    secret_key_ref=client.V1SecretKeySelector(name=name, key=k)
                ),
            )
            for k in sorted(credential_names)
        ),
    ]
    container.volume_mounts = [m for m in container.volume_mounts if m.name != "config"]
    pod.volumes = [v for v in pod.volumes if v.name != "config"]
    return job


def build_warm_secret(job: client.V1Job, credentials: Mapping[str, str]) -> client.V1Secret:
    """The warm Job's Secret: its slot credential only, owned by (and deleted with) the Job."""
    return owned_secret(job, credentials)


class HandoffSender(Protocol):
    async def __call__(self, slot: str, handoff: WarmHandoff) -> WarmClaim | None:
        """The pod's answer, or None when no pod answered in time."""


def nats_sender(request: Callable[..., Awaitable[Any]]) -> HandoffSender:
    """A sender over a NATS connection's `request` (the scheduler's own connection)."""

    async def send(slot: str, handoff: WarmHandoff) -> WarmClaim | None:
        try:
            reply = await request(
                subjects.runner_warm(slot),
                handoff.model_dump_json().encode(),
                timeout=HANDOFF_TIMEOUT_SECONDS,
            )
            return WarmClaim.model_validate_json(reply.data)
        except Exception as exc:  # noqa: BLE001 - no answer, any cause: the run starts cold
            log.warning("warm slot %s: no answer to the hand-off: %s", slot, exc)
            return None

    return send


@dataclass
class IdlePod:
    job: str
    slot: str
    agent: str
    shape: PodShape
    resource_version: str
    created: float  # unix seconds


@dataclass
class WarmPods:
    """The idle warm Jobs by agent and the claim of one (see the module docstring)."""

    settings: KubernetesSettings
    sizes: dict[str, int]
    api: Callable[[], client.ApiClient]
    sender: HandoffSender | None = None
    # NEXUS_NATS_* of a slot: the slot credential (RunCredentialMinter.slot_nats_env).
    slot_env: Callable[[str], Mapping[str, str]] | None = None
    idle: dict[str, list[IdlePod]] = field(default_factory=dict)
    templates: dict[str, RunConfig] = field(default_factory=dict)
    # Warm Jobs being created, per agent: refills run concurrently (one after each start and
    # each idle death), and each must count the others' Jobs, or the pool overfills.
    creating: Counter[str] = field(default_factory=Counter)
    claimed: int = 0
    cold: int = 0

    def size(self, agent: str) -> int:
        return self.sizes.get(agent, self.sizes.get("default", 0))

    @property
    def enabled(self) -> bool:
        return self.sender is not None and any(self.sizes.values())

    async def refill(self, agent: str) -> None:
        """Create warm Jobs for `agent` up to its size, from its last run's pod."""
        template = self.templates.get(agent)
        if template is None or not self.enabled:
            return
        pods = self.idle.setdefault(agent, [])
        while len(pods) + self.creating[agent] < self.size(agent):
            self.creating[agent] += 1
            try:
                pod = await self._create(agent, template)
            finally:
                self.creating[agent] -= 1
            pods.append(pod)

    async def _create(self, agent: str, template: RunConfig) -> IdlePod:
        slot = secrets.token_hex(6)
        env = dict(self.slot_env(slot)) if self.slot_env else {}
        manifest = build_warm_job(template, slot, self.settings, list(env))
        batch = client.BatchV1Api(self.api())
        timeout = self.settings.request_timeout
        job = await batch.create_namespaced_job(
            self.settings.namespace, manifest, _request_timeout=timeout
        )
        await client.CoreV1Api(self.api()).create_namespaced_secret(
            self.settings.namespace, build_warm_secret(job, env), _request_timeout=timeout
        )
        shape = pod_shape(template, self.settings)
        return IdlePod(
            job.metadata.name, slot, agent, shape, job.metadata.resource_version, time.time()
        )

    async def claim(self, config: RunConfig, env: Mapping[str, str]) -> str | None:
        """The warm Job now serving `config`'s attempt, or None: start it cold. Learns the
        agent's pod for the next refill either way."""
        if not self.enabled or config.attempt != 1:
            return None
        agent = config.agent_id
        shape = pod_shape(config, self.settings)
        self.templates[agent] = config
        pods = self.idle.get(agent, [])
        stale = [p for p in pods if p.shape != shape]
        for pod in stale:  # the agent's pod changed: those will never match again
            pods.remove(pod)
            await self.discard(pod.job)
        if not pods:
            self.cold += 1
            return None
        pod = pods.pop(0)
        if not await self._label(pod, config):
            self.cold += 1
            return None  # another scheduler labelled it first: it is theirs
        handoff = WarmHandoff(config=config, env=dict(env))
        answer = await self.sender(pod.slot, handoff) if self.sender else None
        if answer is None or answer.status is not WarmClaimStatus.ACCEPTED:
            # Taken (it serves another run) or silent: never this run's; gone with its pod.
            await self.discard(pod.job)
            self.cold += 1
            return None
        self.claimed += 1
        return pod.job

    async def _label(self, pod: IdlePod, config: RunConfig) -> bool:
        """Label the Job with the attempt it is about to serve, if nobody changed it since it
        was idle (resourceVersion precondition: a 409 means someone else did)."""
        serves = job_name(config.run_id, config.attempt)
        deadline = config.runtime.timeout_seconds or config.budgets.max_wall_seconds
        patch = {
            "metadata": {
                "resourceVersion": pod.resource_version,
                "labels": {
                    SERVES_LABEL: serves,
                    RUN_LABEL: _label_value(config.run_id),
                    ATTEMPT_LABEL: str(config.attempt),
                },
            },
            # The run's deadline, counted from now (the Job's own clock began when it went idle).
            "spec": {"activeDeadlineSeconds": int(deadline + time.time() - pod.created)},
        }
        batch = client.BatchV1Api(self.api())
        try:
            await batch.patch_namespaced_job(
                pod.job,
                self.settings.namespace,
                patch,
                _request_timeout=self.settings.request_timeout,
            )
        except ApiException as exc:
            if exc.status in (404, 409):
                return False
            raise
        return True

    async def discard(self, name: str) -> None:
        batch = client.BatchV1Api(self.api())
        try:
            await batch.delete_namespaced_job(
                name,
                self.settings.namespace,
                propagation_policy="Background",
                grace_period_seconds=0,
                _request_timeout=self.settings.request_timeout,
            )
        except ApiException as exc:
            if exc.status != 404:
                raise

    def forget(self, name: str) -> str | None:
        """An idle warm Job ended (its pod died, or it was deleted): no longer idle. The agent
        whose pool it was in, None if it was not idle here."""
        for agent, pods in self.idle.items():
            for pod in pods:
                if pod.job == name:
                    pods.remove(pod)
                    return agent
        return None

    async def discard_all(self) -> None:
        for pods in self.idle.values():
            for pod in pods:
                await self.discard(pod.job)
        self.idle.clear()
