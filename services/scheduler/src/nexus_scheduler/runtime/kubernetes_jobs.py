"""The Job of a run, pure: its name, manifest and config Secret, and what its status means.

The Job is named from the run id and the attempt (the idempotency key of a start): attempt 1
keeps the name runs always had, a resumed attempt n gets a name of its own (`job_name`), its
own config Secret, and an attempt label. Pods run non-root with a
read-only root filesystem, a writable workspace volume, no privilege escalation, no
capabilities, seccomp RuntimeDefault, no service-account token and, when set, a
RuntimeClass of their own (gVisor); the RunConfig travels in a Secret owned by the
Job. `job_status` maps a Job and its pods to a `RuntimeStatus`, naming the Kubernetes reason
(image pull errors, OOMKilled, evictions, deadlines).
"""

from __future__ import annotations

import base64
import hashlib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kubernetes_asyncio import client
from nexus_events.events import RunConfig

from nexus_scheduler.runtime.base import RuntimeState, RuntimeStatus

if TYPE_CHECKING:
    from nexus_scheduler.config import SchedulerSettings

JOB_NAME_LABEL = "batch.kubernetes.io/job-name"
MANAGED_BY = "app.kubernetes.io/managed-by"
MANAGER = "nexus-scheduler"
RUN_LABEL = "nexus.dev/run-id"
AGENT_LABEL = "nexus.dev/agent-id"
TASK_LABEL = "nexus.dev/task-id"
ATTEMPT_LABEL = "nexus.dev/attempt"
CONFIG_KEY = "config.json"
CONFIG_MOUNT = "/etc/nexus"
WORKSPACE_MOUNT = "/workspace"
# uid/gid of the runner image's unprivileged user.
RUNNER_UID = 10001
# Container waiting reasons that will not heal by waiting: the run has failed.
FATAL_WAITING = frozenset(
    {"ErrImagePull", "ImagePullBackOff", "InvalidImageName", "CreateContainerConfigError"}
)


@dataclass(frozen=True)
class KubernetesSettings:
    namespace: str = "default"
    image: str = "ghcr.io/nexus/runner:latest"
    in_cluster: bool = True
    ttl_after_finished_seconds: int = 3600
    service_account: str | None = None
    workspace_size: str = "10Gi"
    # Client-side bound of every API call (a watch: of each read between its lines, past
    # the server's own WATCH_TIMEOUT_SECONDS; a log follow: of connecting only).
    request_timeout: float = 30.0
    # Secret in the runs namespace with the runner's NATS and LLM settings (deploy/k8s).
    env_secret: str | None = "runner-env"  # noqa: S105 - a Secret's name, not a secret
    # RuntimeClass of runner pods, e.g. gVisor's "runsc" (docs/deploy.md); None: the default.
    runtime_class: str | None = None

    @classmethod
    def from_scheduler(cls, s: SchedulerSettings) -> KubernetesSettings:
        return cls(
            namespace=s.k8s_namespace,
            image=s.k8s_image,
            in_cluster=s.k8s_in_cluster,
            ttl_after_finished_seconds=s.k8s_ttl_after_finished_seconds,
            service_account=s.k8s_service_account,
            env_secret=s.k8s_runner_env_secret,
            request_timeout=s.k8s_request_timeout_seconds,
            runtime_class=s.k8s_runtime_class,
        )


def job_name(run_id: str, attempt: int = 1) -> str:
    """A DNS-1123 label from the run id and attempt; a hash keeps distinct ones distinct.

    Attempt n > 1 is attempt 1's name (cut to fit 63 characters) with ``-<hash>-a<n>``: the
    hash of the run id and attempt keeps it apart from the name of another run id that ends
    in ``-a<n>`` itself.
    """
    base = re.sub(r"[^a-z0-9-]", "-", run_id.lower()).strip("-")
    name = f"nexus-run-{base}"
    if base != run_id or len(name) > 63:
        digest = hashlib.sha256(run_id.encode()).hexdigest()[:8]
        name = f"{name[:54].rstrip('-')}-{digest}"
    if attempt == 1:
        return name
    digest = hashlib.sha256(f"{run_id}\0{attempt}".encode()).hexdigest()[:8]
    suffix = f"-{digest}-a{attempt}"
    return f"{name[: 63 - len(suffix)].rstrip('-')}{suffix}"


def _label_value(value: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "-", value)[:63].strip("-_.") or "none"


def build_job(
    config_: RunConfig,
    settings: KubernetesSettings,
    trace_env: Mapping[str, str] | None = None,
    credential_names: Sequence[str] = (),
) -> client.V1Job:
    """The Job manifest of a run (pure: tests and `kubectl apply --dry-run` can use it).

    `trace_env` (``TRACEPARENT``/``TRACESTATE``) goes into the pod's environment: the runner
    continues the scheduler's trace of the run. `credential_names` are variables of the run's
    NATS credential (`build_secret` stores them): they come from the run's own Secret and win
    over the runner-env Secret's (``env`` beats ``envFrom``).
    """
    name = job_name(config_.run_id, config_.attempt)
    labels = {
        MANAGED_BY: MANAGER,
        RUN_LABEL: _label_value(config_.run_id),
        AGENT_LABEL: _label_value(config_.agent_id),
        ATTEMPT_LABEL: str(config_.attempt),
    }
    if config_.task_id:
        labels[TASK_LABEL] = _label_value(config_.task_id)
    runtime = config_.runtime
    resources = {"cpu": runtime.cpu, "memory": runtime.memory}
    container = client.V1Container(
        name="runner",
        image=runtime.image or settings.image,
        args=["--config", f"{CONFIG_MOUNT}/{CONFIG_KEY}"],
        env=[
            client.V1EnvVar(name="NEXUS_RUN_ID", value=config_.run_id),
            client.V1EnvVar(name="HOME", value=WORKSPACE_MOUNT),
            *(client.V1EnvVar(name=k, value=v) for k, v in sorted((trace_env or {}).items())),
            *(
                client.V1EnvVar(
                    name=k,
                    value_from=client.V1EnvVarSource(
                        secret_key_ref=client.V1SecretKeySelector(name=name, key=k)
                    ),
                )
                for k in sorted(credential_names)
            ),
        ],
        # NATS URL/credentials, the LLM endpoint and OTLP settings come from one Secret, so
        # they never enter the RunConfig (which is an event) or the Job spec.
        env_from=[
            client.V1EnvFromSource(
                secret_ref=client.V1SecretEnvSource(name=settings.env_secret, optional=False)
            )
        ]
        if settings.env_secret
        else None,
        resources=client.V1ResourceRequirements(requests=resources, limits=resources),
        security_context=client.V1SecurityContext(
            run_as_non_root=True,
            run_as_user=RUNNER_UID,
            read_only_root_filesystem=True,
            allow_privilege_escalation=False,
            privileged=False,
            capabilities=client.V1Capabilities(drop=["ALL"]),
        ),
        volume_mounts=[
            client.V1VolumeMount(name="config", mount_path=CONFIG_MOUNT, read_only=True),
            client.V1VolumeMount(name="workspace", mount_path=WORKSPACE_MOUNT),
            client.V1VolumeMount(name="tmp", mount_path="/tmp"),  # noqa: S108 - pod-private
        ],
    )
    pod = client.V1PodSpec(
        restart_policy="Never",
        automount_service_account_token=False,
        # No <SERVICE>_HOST/_PORT variables of the namespace's Services: the runner's env is
        # what this spec and the runner-env Secret set, nothing more.
        enable_service_links=False,
        service_account_name=settings.service_account,
        runtime_class_name=settings.runtime_class,
        security_context=client.V1PodSecurityContext(
            run_as_non_root=True,
            run_as_user=RUNNER_UID,
            run_as_group=RUNNER_UID,
            fs_group=RUNNER_UID,
            seccomp_profile=client.V1SeccompProfile(type="RuntimeDefault"),
        ),
        containers=[container],
        volumes=[
            client.V1Volume(
                name="config",
                secret=client.V1SecretVolumeSource(
                    secret_name=name,
                    default_mode=0o400,
                    optional=False,
                    # The config only: the credential reaches the runner as env.
                    items=[client.V1KeyToPath(key=CONFIG_KEY, path=CONFIG_KEY)],
                ),
            ),
            client.V1Volume(
                name="workspace",
                empty_dir=client.V1EmptyDirVolumeSource(size_limit=settings.workspace_size),
            ),
            client.V1Volume(name="tmp", empty_dir=client.V1EmptyDirVolumeSource()),
        ],
    )
    return client.V1Job(
        api_version="batch/v1",
        kind="Job",
        metadata=client.V1ObjectMeta(name=name, labels=labels),
        spec=client.V1JobSpec(
            backoff_limit=0,
            active_deadline_seconds=runtime.timeout_seconds or config_.budgets.max_wall_seconds,
            ttl_seconds_after_finished=settings.ttl_after_finished_seconds,
            template=client.V1PodTemplateSpec(
                metadata=client.V1ObjectMeta(labels=labels), spec=pod
            ),
        ),
    )


def build_secret(
    config_: RunConfig, job: client.V1Job, credentials: Mapping[str, str] | None = None
) -> client.V1Secret:
    """The Secret holding the RunConfig and the run's NATS credential (`credentials`), owned
    by (and garbage-collected with) the Job."""
    data = {CONFIG_KEY: config_.model_dump_json(), **(credentials or {})}
    return owned_secret(job, data)


def owned_secret(job: client.V1Job, data: Mapping[str, str]) -> client.V1Secret:
    """A Secret of `job`'s name and labels holding `data`, owned by (and garbage-collected
    with) the Job: a run Job's config and credential, a warm Job's slot credential."""
    return client.V1Secret(
        api_version="v1",
        kind="Secret",
        type="Opaque",
        metadata=client.V1ObjectMeta(
            name=job.metadata.name,
            labels=dict(job.metadata.labels),
            owner_references=[
                client.V1OwnerReference(
                    api_version="batch/v1",
                    kind="Job",
                    name=job.metadata.name,
                    uid=job.metadata.uid,
                    controller=True,
                    block_owner_deletion=True,
                )
            ],
        ),
        data={k: base64.b64encode(v.encode()).decode() for k, v in data.items()},
    )


def job_status(  # noqa: PLR0911 - one exit per Kubernetes outcome
    job: client.V1Job, pods: list[client.V1Pod]
) -> RuntimeStatus:
    """Map a Job and its pods to a runtime status, naming the Kubernetes reason."""
    conditions = {c.type: c for c in (job.status.conditions or []) if c.status == "True"}
    failed = conditions.get("Failed")
    if failed is not None:
        if failed.reason == "DeadlineExceeded":
            return RuntimeStatus(RuntimeState.TIMED_OUT, "DeadlineExceeded", failed.message or "")
        pod_reason = _pod_failure(pods)
        if pod_reason is not None:
            return RuntimeStatus(RuntimeState.FAILED, pod_reason[0], pod_reason[1])
        return RuntimeStatus(RuntimeState.FAILED, failed.reason, failed.message or "")
    if "Complete" in conditions:
        return RuntimeStatus(RuntimeState.EXITED, "Complete", "job completed", exit_code=0)
    pod_reason = _pod_failure(pods)
    if pod_reason is not None:
        return RuntimeStatus(RuntimeState.FAILED, pod_reason[0], pod_reason[1])
    if any(p.status and p.status.phase == "Running" for p in pods):
        return RuntimeStatus(RuntimeState.RUNNING)
    return RuntimeStatus(RuntimeState.PENDING)


def _pod_failure(pods: list[client.V1Pod]) -> tuple[str, str] | None:
    for pod in pods:
        status = pod.status
        if status is None:
            continue
        if status.reason == "Evicted":
            return "Evicted", status.message or "pod evicted"
        for cs in status.container_statuses or []:
            state = cs.state
            if state is None:
                continue
            if state.waiting is not None and state.waiting.reason in FATAL_WAITING:
                return state.waiting.reason, state.waiting.message or ""
            term = state.terminated
            if term is not None and term.exit_code != 0:
                return term.reason or "Error", term.message or f"exit code {term.exit_code}"
    return None
