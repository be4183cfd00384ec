"""Runs as Kubernetes Jobs (kubernetes-asyncio): one Job per run attempt, named from the run id
and the attempt (a resumed run's attempt n+1 is a Job of its own, `job_name`).

The Job is the idempotency key: starting a run whose Job exists adopts it (the manifest,
the config Secret and the status mapping are in `kubernetes_jobs`). Watches on the run Jobs
and on their pods keep a status cache, so a status asks the API server nothing while the
watches are in sync (a run the cache does not know is read through). Every API call has a
client-side timeout (`request_timeout`): an API server that stops answering fails the call
with `AgentRuntimeError` instead of hanging the scheduler.

With a warm pool (`warm_pool`, docs/warm-starts.md) attempt 1 of a run is first offered to an
idle warm Job of its agent (`kubernetes_warm`); the Job that serves an attempt is then found
by its ``nexus.dev/serves`` label, a cold attempt's by its name.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any, TypeVar

import aiohttp
import tenacity
from kubernetes_asyncio import client, config, watch
from kubernetes_asyncio.client.exceptions import ApiException
from nexus_events.events import RunConfig
from nexus_events.events.warm import WarmClaimStatus, WarmHandoff
from nexus_events.runtime import telemetry

from nexus_scheduler.metrics import RunnerStart, SchedulerMetrics
from nexus_scheduler.runtime.base import AgentRuntimeError, RunHandle, RuntimeState, RuntimeStatus
from nexus_scheduler.runtime.kubernetes_jobs import (
    JOB_NAME_LABEL,
    MANAGED_BY,
    MANAGER,
    RUNNER_UID,
    WORKSPACE_MOUNT,
    KubernetesSettings,
    build_job,
    build_secret,
    job_name,
    job_status,
)
from nexus_scheduler.runtime.kubernetes_warm import (
    SERVES_LABEL,
    WARM_SLOT_LABEL,
    HandoffSender,
    WarmPods,
    nats_sender,
)

log = logging.getLogger(__name__)

# Server-side watch timeout; the loop re-opens the watch after it.
WATCH_TIMEOUT_SECONDS = 300
# Pause before re-opening a watch that failed.
WATCH_RETRY_SECONDS = 1.0

T = TypeVar("T")

# The names other modules (tests, deploy checks) import from here.
__all__ = [
    "MANAGED_BY",
    "MANAGER",
    "RUNNER_UID",
    "KubernetesRuntime",
    "KubernetesSettings",
    "build_job",
    "job_name",
]


class KubernetesRuntime:
    kind = "kubernetes"

    def __init__(
        self,
        settings: KubernetesSettings,
        *,
        configuration: client.Configuration | None = None,
        credentials: Callable[[RunConfig], Mapping[str, str]] | None = None,
        warm_pool: Mapping[str, int] | None = None,
        slot_credentials: Callable[[str], Mapping[str, str]] | None = None,
        handoff: HandoffSender | None = None,
    ) -> None:
        self.settings = settings
        # The run's own NATS credential (NEXUS_NATS_*), None: the runner-env Secret's.
        self.credentials = credentials
        self._configuration = configuration
        self._api: client.ApiClient | None = None
        self._statuses: dict[str, client.V1Job] = {}
        # Pods of the run Jobs, by Job name then pod name; trusted only while `pods_synced`.
        self._pods_by_job: dict[str, dict[str, client.V1Pod]] = {}
        self._watch_tasks: list[asyncio.Task[None]] = []
        self.watch_ready = asyncio.Event()
        self.pods_synced = asyncio.Event()
        # Job name of a run attempt -> the warm Job serving it (its SERVES_LABEL).
        self._served_by: dict[str, str] = {}
        self.warm = WarmPods(
            settings, dict(warm_pool or {}), self._client, handoff, slot_credentials
        )
        self._refills: set[asyncio.Task[None]] = set()
        self._closing = False
        self.metrics: SchedulerMetrics | None = None  # set by the app (`attach_metrics`)

    def attach_metrics(self, metrics: SchedulerMetrics) -> None:
        """Count warm and cold starts, observe the idle warm pods (as the local runtime)."""
        self.metrics = metrics
        if self.warm.enabled:
            warm = self.warm
            metrics.observe_idle_runners(lambda: sum(len(p) for p in warm.idle.values()))

    def attach_nats(self, nc: Any) -> None:
        """Hand warm pods their runs over the scheduler's NATS connection (app.py)."""
        if self.warm.sender is None:
            self.warm.sender = nats_sender(nc.request)

    def _job_of(self, run_id: str, attempt: int) -> str:
        """The Job serving the attempt: a warm one that claimed it, else its own name."""
        name = job_name(run_id, attempt)
        return self._served_by.get(name, name)

    @property
    def namespace(self) -> str:
        return self.settings.namespace

    def _client(self) -> client.ApiClient:
        if self._api is None:
            raise AgentRuntimeError("KubernetesRuntime is not started")
        return self._api

    async def _call(self, what: str, call: Awaitable[T]) -> T:
        """Await one API call made with `_request_timeout`; a timeout or a broken
        connection becomes `AgentRuntimeError` (an `ApiException` passes through)."""
        try:
            return await call
        except TimeoutError as exc:
            raise AgentRuntimeError(
                f"{what}: no answer from the Kubernetes API within "
                f"{self.settings.request_timeout:g}s"
            ) from exc
        except aiohttp.ClientError as exc:
            raise AgentRuntimeError(f"{what}: {type(exc).__name__}: {exc}") from exc

    async def start(self) -> None:
        if self._api is not None:
            return
        self._closing = False
        configuration = self._configuration
        if configuration is None:
            configuration = client.Configuration()
            if self.settings.in_cluster:
                config.load_incluster_config(  # type: ignore[no-untyped-call]
                    client_configuration=configuration
                )
            else:
                await config.load_kube_config(client_configuration=configuration)
        # Watch() deserializes with a client built from the default configuration.
        client.Configuration.set_default(configuration)
        self._api = client.ApiClient(configuration)
        self._watch_tasks = [
            asyncio.create_task(self._watch_jobs(), name="k8s:watch-jobs"),
            asyncio.create_task(self._watch_pods(), name="k8s:watch-pods"),
        ]
        await self._discard_left_idle()

    async def _discard_left_idle(self) -> None:
        """Delete the idle warm Jobs a previous scheduler left (never handed a run: a claim
        labels before it hands); claimed ones are adopted through their labels."""
        batch = client.BatchV1Api(self._client())
        try:
            jobs = await self._call(
                "list warm Jobs",
                batch.list_namespaced_job(
                    self.namespace,
                    label_selector=f"{MANAGED_BY}={MANAGER}",
                    _request_timeout=self.settings.request_timeout,
                ),
            )
        except (AgentRuntimeError, ApiException) as exc:  # the watch adopts them later
            log.warning("cannot list warm Jobs left by a previous scheduler: %s", exc)
            return
        for job in jobs.items:
            labels = job.metadata.labels or {}
            if WARM_SLOT_LABEL in labels and SERVES_LABEL not in labels:
                await self.warm.discard(job.metadata.name)
            elif SERVES_LABEL in labels:
                self._served_by[labels[SERVES_LABEL]] = job.metadata.name

    async def close(self) -> None:
        # No new refills; the watches (whose events start them) stop; the refills under way
        # finish (a cancelled API call can hold a pooled connection the deletes then wait for).
        self._closing = True
        for task in self._watch_tasks:
            task.cancel()
        for task in self._watch_tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._watch_tasks = []
        if self._refills:
            await asyncio.wait(list(self._refills), timeout=self.settings.request_timeout)
        with contextlib.suppress(Exception):  # idle pods cost; a restart discards them anyway
            await asyncio.wait_for(self.warm.discard_all(), self.settings.request_timeout)
        if self._api is not None:
            await self._api.close()
            self._api = None

    async def start_run(self, config_: RunConfig) -> RunHandle:
        credentials = self.credentials(config_) if self.credentials else {}
        served = self._served_by.get(job_name(config_.run_id, config_.attempt))
        if served is not None:  # adopt: a warm Job claimed this attempt
            await self._hand_again(config_, served, credentials)
            return RunHandle(self.kind, served, warm=True)
        try:
            warm = await self._claim_warm(config_, credentials)
        finally:
            self._refill(config_.agent_id)
        if warm is not None:
            self._count_start(RunnerStart.WARM)
            return RunHandle(self.kind, warm, warm=True)
        handle = await self._start_cold(config_, credentials)
        self._count_start(RunnerStart.COLD)
        return handle

    def _count_start(self, how: RunnerStart) -> None:
        if self.metrics is not None:
            self.metrics.runner_started(how)

    async def _hand_again(
        self, config_: RunConfig, served: str, credentials: Mapping[str, str]
    ) -> None:
        """Send the hand-off to the warm Job labelled for this attempt once more: a scheduler
        that labelled it may have died before sending. The pod accepts the same run again (or
        has exited after serving it: no answer); either way the Job stays the attempt's."""
        job = self._statuses.get(served)
        slot = (job.metadata.labels or {}).get(WARM_SLOT_LABEL) if job is not None else None
        if slot is None or self.warm.sender is None:
            return
        handoff = WarmHandoff(config=config_, env=self._run_env(config_, credentials))
        answer = await self.warm.sender(slot, handoff)
        if answer is not None and answer.status is not WarmClaimStatus.ACCEPTED:
            log.error(
                "warm Job %s is labelled for %s attempt %d but serves %s attempt %d",
                served, config_.run_id, config_.attempt, answer.run_id, answer.attempt,
            )  # fmt: skip

    @staticmethod
    def _run_env(config_: RunConfig, credentials: Mapping[str, str]) -> dict[str, str]:
        """The run's own environment a warm pod is handed (a cold pod's comes in its spec)."""
        return {
            "NEXUS_RUN_ID": config_.run_id,
            "HOME": WORKSPACE_MOUNT,
            **telemetry.trace_env(),
            **credentials,
        }

    async def _claim_warm(self, config_: RunConfig, credentials: Mapping[str, str]) -> str | None:
        name = job_name(config_.run_id, config_.attempt)
        if not self.warm.enabled or name in self._statuses:
            return None
        env = self._run_env(config_, credentials)
        try:
            warm = await self.warm.claim(config_, env)
        except (ApiException, aiohttp.ClientError, TimeoutError) as exc:
            log.warning("warm claim of %s failed, starting it cold: %s", config_.run_id, exc)
            return None
        if warm is not None:
            self._served_by[name] = warm
        return warm

    def _refill(self, agent: str) -> None:
        if not self.warm.enabled or self._closing:
            return
        task = asyncio.create_task(self._refill_logged(agent), name=f"k8s:warm-refill:{agent}")
        self._refills.add(task)
        task.add_done_callback(self._refills.discard)

    async def _refill_logged(self, agent: str) -> None:
        try:
            await self.warm.refill(agent)
        except (ApiException, aiohttp.ClientError, TimeoutError) as exc:
            log.warning("warm pool of %s: cannot start a warm Job: %s", agent, exc)

    async def _start_cold(self, config_: RunConfig, credentials: Mapping[str, str]) -> RunHandle:
        batch = client.BatchV1Api(self._client())
        core = client.CoreV1Api(self._client())
        manifest = build_job(config_, self.settings, telemetry.trace_env(), list(credentials))
        name = manifest.metadata.name
        timeout = self.settings.request_timeout
        try:
            job = await self._call(
                f"create Job {name}",
                batch.create_namespaced_job(self.namespace, manifest, _request_timeout=timeout),
            )
        except ApiException as exc:
            if exc.status != 409:
                raise AgentRuntimeError(
                    f"cannot create Job {name}: {exc.status} {exc.reason}"
                ) from exc
            job = await self._call(  # adopt
                f"read Job {name}",
                batch.read_namespaced_job(name, self.namespace, _request_timeout=timeout),
            )
        try:
            await self._call(
                f"create Secret {name}",
                core.create_namespaced_secret(
                    self.namespace,
                    build_secret(config_, job, credentials),
                    _request_timeout=timeout,
                ),
            )
        except ApiException as exc:
            if exc.status != 409:
                raise AgentRuntimeError(f"cannot create Secret {name}: {exc.status}") from exc
        return RunHandle(self.kind, name)

    async def cancel_run(self, run_id: str, attempt: int = 1) -> None:
        batch = client.BatchV1Api(self._client())
        name = self._job_of(run_id, attempt)
        try:
            # Background propagation: without it a batch/v1 Job's pods are orphaned.
            await self._call(
                f"delete Job {name}",
                batch.delete_namespaced_job(
                    name,
                    self.namespace,
                    propagation_policy="Background",
                    _request_timeout=self.settings.request_timeout,
                ),
            )
        except ApiException as exc:
            if exc.status != 404:
                raise AgentRuntimeError(
                    f"cannot delete Job of {run_id} attempt {attempt}: {exc.status}"
                ) from exc
        self._statuses.pop(name, None)  # do not wait for the watch to say so

    async def status(self, run_id: str, attempt: int = 1) -> RuntimeStatus:
        """From the watch caches when they know the attempt's Job; else read from the API."""
        name = self._job_of(run_id, attempt)
        job = self._statuses.get(name)
        if job is not None and self.pods_synced.is_set():
            return job_status(job, list(self._pods_by_job.get(name, {}).values()))
        if job is None:
            batch = client.BatchV1Api(self._client())
            try:
                job = await self._call(
                    f"read Job {name}",
                    batch.read_namespaced_job(
                        name, self.namespace, _request_timeout=self.settings.request_timeout
                    ),
                )
            except ApiException as exc:
                if exc.status == 404:
                    return RuntimeStatus(RuntimeState.GONE, message=f"no Job {name}")
                raise AgentRuntimeError(f"cannot read Job {name}: {exc.status}") from exc
        return job_status(job, await self._pods(name))

    async def _pods(self, name: str) -> list[client.V1Pod]:
        core = client.CoreV1Api(self._client())
        pods = await self._call(
            f"list pods of {name}",
            core.list_namespaced_pod(
                self.namespace,
                label_selector=f"{JOB_NAME_LABEL}={name}",
                _request_timeout=self.settings.request_timeout,
            ),
        )
        return list(pods.items)

    async def stream_logs(self, run_id: str, attempt: int = 1) -> AsyncIterator[str]:
        name = self._job_of(run_id, attempt)
        pods = await self._pods(name)
        if not pods:
            return
        core = client.CoreV1Api(self._client())
        # With _preload_content=False the client hands back the aiohttp response. Only the
        # connection is bounded: a followed log may stay quiet for as long as the run works.
        timeout = aiohttp.ClientTimeout(
            connect=self.settings.request_timeout, sock_connect=self.settings.request_timeout
        )
        resp: Any = await self._call(
            f"read log of {pods[0].metadata.name}",
            core.read_namespaced_pod_log(
                pods[0].metadata.name,
                self.namespace,
                follow=True,
                _preload_content=False,
                _request_timeout=timeout,
            ),
        )
        try:
            async for raw in resp.content:
                yield raw.decode(errors="replace").rstrip("\n")
        finally:
            resp.release()

    def _watch_timeout(self) -> tuple[float, float]:
        # (connect, read between lines): the server ends a quiet watch after
        # WATCH_TIMEOUT_SECONDS, so silence past that plus the request timeout is a dead one.
        timeout = self.settings.request_timeout
        return timeout, WATCH_TIMEOUT_SECONDS + timeout

    async def _reopening(self, what: str, watch_once: Callable[[], Awaitable[None]]) -> None:
        """Run `watch_once` forever: again at once when it ends (the server's watch timeout),
        after WATCH_RETRY_SECONDS when it fails (logged); cancellation ends it."""
        again = tenacity.AsyncRetrying(
            retry=tenacity.retry_if_exception_type(Exception),
            wait=tenacity.wait_fixed(WATCH_RETRY_SECONDS),
            before_sleep=lambda state: log.error(
                "%s failed; re-opening",
                what,
                exc_info=state.outcome.exception() if state.outcome else None,
            ),
        )
        while True:
            await again(watch_once)

    async def _watch_jobs(self) -> None:
        """Keep the Job cache fresh; deleted Jobs leave it (status then reads GONE)."""
        await self._reopening("Job watch", self._watch_jobs_once)

    async def _watch_jobs_once(self) -> None:
        batch = client.BatchV1Api(self._client())
        async with watch.Watch() as w:
            stream = w.stream(
                batch.list_namespaced_job,
                self.namespace,
                label_selector=f"{MANAGED_BY}={MANAGER}",
                timeout_seconds=WATCH_TIMEOUT_SECONDS,
                _request_timeout=self._watch_timeout(),
            )
            self.watch_ready.set()
            async for event in stream:
                self._apply_watch_event(event["type"], event["object"])

    def _apply_watch_event(self, kind: str, job: Any) -> None:
        name = job.metadata.name
        labels = job.metadata.labels or {}
        if SERVES_LABEL in labels:
            self._served_by[labels[SERVES_LABEL]] = name
        elif WARM_SLOT_LABEL in labels:
            self._idle_warm_event(kind, job)
        if kind == "DELETED":
            self._statuses.pop(name, None)
            self._pods_by_job.pop(name, None)
        else:
            self._statuses[name] = job

    def _idle_warm_event(self, kind: str, job: Any) -> None:
        """An idle warm Job deleted or ended (its pod died waiting): replaced, no run's."""
        ended = any(
            c.type in ("Failed", "Complete") and c.status == "True"
            for c in (job.status.conditions if job.status else None) or []
        )
        if kind == "DELETED" or ended:
            agent = self.warm.forget(job.metadata.name)
            if agent is not None:
                if ended:
                    self._discard_later(job.metadata.name)
                self._refill(agent)

    def _discard_later(self, name: str) -> None:
        if self._closing:
            return
        task = asyncio.create_task(self.warm.discard(name), name=f"k8s:warm-discard:{name}")
        self._refills.add(task)
        task.add_done_callback(self._refills.discard)

    async def _watch_pods(self) -> None:
        """Keep the pod cache of the run Jobs fresh: listed once, then watched from there.

        While the list or the watch is down, `pods_synced` is clear and status() lists the
        pods of the run it is asked about, as it did before the cache.
        """
        await self._reopening("pod watch", self._watch_pods_once)

    async def _watch_pods_once(self) -> None:
        core = client.CoreV1Api(self._client())
        selector = f"{MANAGED_BY}={MANAGER}"
        listed = await self._call(
            "list run pods",
            core.list_namespaced_pod(
                self.namespace,
                label_selector=selector,
                _request_timeout=self.settings.request_timeout,
            ),
        )
        self._pods_by_job = {}
        for pod in listed.items:
            self._apply_pod_event("ADDED", pod)
        self.pods_synced.set()
        try:
            async with watch.Watch() as w:
                stream = w.stream(
                    core.list_namespaced_pod,
                    self.namespace,
                    label_selector=selector,
                    resource_version=listed.metadata.resource_version,
                    timeout_seconds=WATCH_TIMEOUT_SECONDS,
                    _request_timeout=self._watch_timeout(),
                )
                async for event in stream:
                    self._apply_pod_event(event["type"], event["object"])
        finally:
            self.pods_synced.clear()  # events may be missed until the next list

    def _apply_pod_event(self, kind: str, pod: Any) -> None:
        labels = pod.metadata.labels or {}
        job = labels.get(JOB_NAME_LABEL)
        if job is None:
            return
        if kind == "DELETED":
            pods = self._pods_by_job.get(job)
            if pods is not None:
                pods.pop(pod.metadata.name, None)
                if not pods:
                    del self._pods_by_job[job]
        else:
            self._pods_by_job.setdefault(job, {})[pod.metadata.name] = pod
