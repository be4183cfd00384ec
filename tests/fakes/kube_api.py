"""A fake Kubernetes API server: just enough of batch/v1 Jobs, v1 Secrets, Pods, pod logs
(with follow) and watches for the real kubernetes-asyncio client.

It stores what it receives (tests assert on the manifests) and lets a test drive the cluster
side: give a Job a status, add its pod, append log lines, end the log. Every change to a Job
or a pod is sent to open watches of that kind as newline-delimited ``{"type", "object"}``
frames. `hang(method, fragment)` makes matching requests wait without an answer (an API
server that stopped responding) until `release_hung()` or the server closes.

Mirrors (docs/fakes.md): kubernetes-asyncio's models (every body deserializes with no key the
model lacks) and the API server where Nexus depends on it: a created Job gets the server's
defaults (``generation``, ``backoffLimit`` 6, ``completions``/``parallelism`` 1,
``completionMode``, ``suspend``, the controller-uid ``selector`` and template labels); its pods
carry those labels and an ``ownerReference`` to it; errors are ``Status`` bodies with
``details`` (``jobs.batch "x" not found``); a DELETE answers ``Status`` Success with
``details`` (name, group, kind, uid); a PATCH of a Job merges maps and takes a
``metadata.resourceVersion`` as a precondition (409 Conflict when stale); a Job's pods and
owned Secrets go only with a ``propagationPolicy`` of Background or Foreground (batch/v1
orphans them by default); a list has ``metadata.resourceVersion`` and a watch from it sends
only later changes (without one, the current objects as ADDED first). Checked by
tests/fakes_contract/test_kube.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import itertools
import json
import uuid
from collections import defaultdict
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from aiohttp import web

from tests.fakes.http import LocalHttpServer

JOB_NAME_LABEL = "batch.kubernetes.io/job-name"
CONTROLLER_UID_LABEL = "batch.kubernetes.io/controller-uid"
# The API server's defaults for a batch/v1 Job's spec (where the client left them out).
JOB_SPEC_DEFAULTS = {
    "backoffLimit": 6,
    "completions": 1,
    "parallelism": 1,
    "completionMode": "NonIndexed",
    "suspend": False,
    "podReplacementPolicy": "TerminatingOrFailed",
}
# Which resource a kind is, for Status details ("kind" there is the resource, as the server
# sends it) and messages (`jobs.batch "x" not found`).
RESOURCES = {"Job": ("batch", "jobs"), "Secret": ("", "secrets"), "Pod": ("", "pods")}

# The parsed request body, stored by the recording middleware for the handlers. A typed key:
# aiohttp warns once per process about a plain str key, and under filterwarnings=error that
# warning failed whichever request first set it (a 500 that flaked the first test to POST).
JSON_BODY: web.RequestKey[Any] = web.RequestKey("json", object)


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _status(
    code: int, reason: str, message: str, details: dict[str, Any] | None = None
) -> web.Response:
    body: dict[str, Any] = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }
    if details is not None:
        body["details"] = details
    return web.json_response(body, status=code)


def _details(kind: str, name: str) -> dict[str, Any]:
    group, resource = RESOURCES[kind]
    return {"name": name, "kind": resource, **({"group": group} if group else {})}


def _qualified(kind: str) -> str:
    group, resource = RESOURCES[kind]
    return f"{resource}.{group}" if group else resource


def _not_found(kind: str, name: str) -> web.Response:
    message = f'{_qualified(kind)} "{name}" not found'
    return _status(404, "NotFound", message, _details(kind, name))


def _already_exists(kind: str, name: str) -> web.Response:
    message = f'{_qualified(kind)} "{name}" already exists'
    return _status(409, "AlreadyExists", message, _details(kind, name))


def _matches(obj: dict[str, Any], selector: str | None) -> bool:
    if not selector:
        return True
    labels = obj.get("metadata", {}).get("labels") or {}
    for term in selector.split(","):
        key, _, value = term.partition("=")
        if labels.get(key) != value:
            return False
    return True


@dataclass
class _Log:
    lines: list[str] = field(default_factory=list)
    done: bool = False
    changed: asyncio.Condition = field(default_factory=asyncio.Condition)


@dataclass
class Request:
    method: str
    path: str
    query: dict[str, str]
    body: Any


class FakeKubeApi:
    """Run with `async with FakeKubeApi() as api:`; point the client at `api.host`."""

    def __init__(self) -> None:
        self.jobs: dict[tuple[str, str], dict[str, Any]] = {}
        self.secrets: dict[tuple[str, str], dict[str, Any]] = {}
        self.pods: dict[tuple[str, str], dict[str, Any]] = {}
        self.requests: list[Request] = []
        self._logs: dict[tuple[str, str], _Log] = defaultdict(_Log)
        # (kind, namespace, label selector, queue) of each open watch.
        self._watchers: list[tuple[str, str, str | None, asyncio.Queue[dict[str, Any] | None]]] = []
        # Every change as (resourceVersion, namespace, frame): a watch from a resourceVersion
        # replays what came after it.
        self._history: list[tuple[int, str, dict[str, Any]]] = []
        self._rv = itertools.count(1)
        self._last_rv = 0
        self._http = LocalHttpServer()
        self._hangs: list[tuple[str, str]] = []
        self._failures: list[tuple[str, str]] = []
        self._released = asyncio.Event()

    @property
    def port(self) -> int:
        return self._http.port

    @property
    def host(self) -> str:
        return self._http.url

    # -- lifecycle ---------------------------------------------------------------------------

    async def __aenter__(self) -> FakeKubeApi:
        app = web.Application(middlewares=[self._record])
        jobs = "/apis/batch/v1/namespaces/{ns}/jobs"
        app.router.add_post(jobs, self._create_job)
        app.router.add_get(jobs, self._list_jobs)
        app.router.add_get(jobs + "/{name}", self._get_job)
        app.router.add_delete(jobs + "/{name}", self._delete_job)
        app.router.add_patch(jobs + "/{name}", self._patch_job)
        secrets = "/api/v1/namespaces/{ns}/secrets"
        app.router.add_post(secrets, self._create_secret)
        app.router.add_get(secrets + "/{name}", self._get_secret)
        pods = "/api/v1/namespaces/{ns}/pods"
        app.router.add_get(pods, self._list_pods)
        app.router.add_get(pods + "/{name}/log", self._pod_log)
        await self._http.serve(app)
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._released.set()
        for _, _, _, queue in self._watchers:
            queue.put_nowait(None)
        for log in self._logs.values():
            log.done = True
            async with log.changed:
                log.changed.notify_all()
        await self._http.close()

    @web.middleware
    async def _record(self, request: web.Request, handler: Any) -> web.StreamResponse:
        body = None
        if request.can_read_body:
            raw = await request.read()
            body = json.loads(raw) if raw else None
        self.requests.append(Request(request.method, request.path, dict(request.query), body))
        request[JSON_BODY] = body
        if any(request.method == m and f in request.path for m, f in self._hangs):
            await self._released.wait()
        for rule in self._failures:
            if request.method == rule[0] and rule[1] in request.path:
                self._failures.remove(rule)
                return _status(500, "InternalError", "injected failure")
        response: web.StreamResponse = await handler(request)
        return response

    # -- what a test drives ------------------------------------------------------------------

    def hang(self, method: str, fragment: str) -> None:
        """Leave every `method` request whose path contains `fragment` unanswered."""
        self._hangs.append((method, fragment))

    def fail_next(self, method: str, fragment: str) -> None:
        """Answer the next matching request with a 500."""
        self._failures.append((method, fragment))

    def end_watches(self) -> None:
        """Close every open watch, as the API server does at its watch timeout."""
        for _, _, _, queue in self._watchers:
            queue.put_nowait(None)

    def release_hung(self) -> None:
        self._hangs.clear()
        self._released.set()

    def job(self, name: str, namespace: str = "default") -> dict[str, Any]:
        return self.jobs[(namespace, name)]

    def set_job_status(self, name: str, status: dict[str, Any], namespace: str = "default") -> None:
        job = self.jobs[(namespace, name)]
        job["status"] = status
        self._touch(job)
        self._notify(namespace, "MODIFIED", job)

    def add_pod(
        self,
        job_name: str,
        *,
        phase: str = "Running",
        namespace: str = "default",
        reason: str | None = None,
        container_statuses: list[dict[str, Any]] | None = None,
    ) -> str:
        name = f"{job_name}-{uuid.uuid4().hex[:5]}"
        # The Job controller gives a pod its template's labels (the job-name and controller-uid
        # ones among them) and makes the Job its controlling owner.
        job = self.jobs.get((namespace, job_name))
        template = (job or {}).get("spec", {}).get("template", {}).get("metadata", {})
        labels = {**(template.get("labels") or {}), JOB_NAME_LABEL: job_name, "job-name": job_name}
        meta: dict[str, Any] = {
            "name": name,
            "generateName": f"{job_name}-",
            "namespace": namespace,
            "uid": str(uuid.uuid4()),
            "labels": labels,
            "creationTimestamp": _now(),
        }
        if job is not None:
            meta["ownerReferences"] = [
                {"apiVersion": "batch/v1", "kind": "Job", "name": job_name,
                 "uid": job["metadata"]["uid"], "controller": True, "blockOwnerDeletion": True},
            ]  # fmt: skip
        pod: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": meta,
            "spec": {"containers": [{"name": "runner", "image": "x"}]},
            "status": {"phase": phase, "containerStatuses": container_statuses or []},
        }
        if reason:
            pod["status"]["reason"] = reason
        self._touch(pod)
        self.pods[(namespace, name)] = pod
        self._notify(namespace, "ADDED", pod)
        return name

    def set_pod_status(self, name: str, status: dict[str, Any], namespace: str = "default") -> None:
        pod = self.pods[(namespace, name)]
        pod["status"] = status
        self._touch(pod)
        self._notify(namespace, "MODIFIED", pod)

    async def append_log(self, pod: str, *lines: str, namespace: str = "default") -> None:
        log = self._logs[(namespace, pod)]
        async with log.changed:
            log.lines.extend(lines)
            log.changed.notify_all()

    async def end_log(self, pod: str, namespace: str = "default") -> None:
        log = self._logs[(namespace, pod)]
        async with log.changed:
            log.done = True
            log.changed.notify_all()

    def requests_to(self, method: str, fragment: str) -> list[Request]:
        return [r for r in self.requests if r.method == method and fragment in r.path]

    # -- objects -----------------------------------------------------------------------------

    def _touch(self, obj: dict[str, Any]) -> None:
        self._last_rv = next(self._rv)
        obj["metadata"]["resourceVersion"] = str(self._last_rv)

    def _new(self, request: web.Request, kind: str) -> dict[str, Any]:
        obj: dict[str, Any] = copy.deepcopy(request[JSON_BODY])
        meta = obj.setdefault("metadata", {})
        meta["namespace"] = request.match_info["ns"]
        meta["uid"] = str(uuid.uuid4())
        meta["creationTimestamp"] = _now()
        obj.setdefault("kind", kind)
        self._touch(obj)
        return obj

    def _notify(self, namespace: str, kind: str, obj: dict[str, Any]) -> None:
        frame = {"type": kind, "object": copy.deepcopy(obj)}
        self._history.append((int(obj["metadata"]["resourceVersion"]), namespace, frame))
        for watched, ns, selector, queue in self._watchers:
            if watched == obj.get("kind") and ns == namespace and _matches(obj, selector):
                queue.put_nowait(copy.deepcopy(frame))

    def _list_meta(self) -> dict[str, Any]:
        return {"resourceVersion": str(self._last_rv)}

    # -- jobs --------------------------------------------------------------------------------

    async def _create_job(self, request: web.Request) -> web.Response:
        ns = request.match_info["ns"]
        name = request[JSON_BODY]["metadata"]["name"]
        if (ns, name) in self.jobs:
            return _already_exists("Job", name)
        job = self._new(request, "Job")
        _default_job(job)
        self.jobs[(ns, name)] = job
        self._notify(ns, "ADDED", job)
        return web.json_response(job, status=201)

    async def _get_job(self, request: web.Request) -> web.Response:
        key = (request.match_info["ns"], request.match_info["name"])
        if key not in self.jobs:
            return _not_found("Job", key[1])
        return web.json_response(self.jobs[key])

    async def _patch_job(self, request: web.Request) -> web.Response:
        """A merge of the body into the Job (strategic/merge patch of maps); a
        ``metadata.resourceVersion`` in it is a precondition: 409 Conflict if it is stale."""
        key = (request.match_info["ns"], request.match_info["name"])
        job = self.jobs.get(key)
        if job is None:
            return _not_found("Job", key[1])
        body = copy.deepcopy(request[JSON_BODY])
        wanted = body.get("metadata", {}).pop("resourceVersion", None)
        if wanted is not None and wanted != job["metadata"]["resourceVersion"]:
            message = (
                f'Operation cannot be fulfilled on jobs.batch "{key[1]}": the object has been'
                " modified; please apply your changes to the latest version and try again"
            )
            return _status(409, "Conflict", message, _details("Job", key[1]))
        _merge(job, body)
        self._touch(job)
        self._notify(key[0], "MODIFIED", job)
        return web.json_response(job)

    async def _delete_job(self, request: web.Request) -> web.Response:
        key = (request.match_info["ns"], request.match_info["name"])
        job = self.jobs.pop(key, None)
        if job is None:
            return _not_found("Job", key[1])
        body = request[JSON_BODY] if isinstance(request[JSON_BODY], dict) else {}
        policy = request.query.get("propagationPolicy") or body.get("propagationPolicy")
        uid = job["metadata"]["uid"]
        self._touch(job)
        self._notify(key[0], "DELETED", job)
        # The garbage collector removes dependents (the pods, Secrets owned by the Job) only
        # with a propagation policy: batch/v1 orphans them by default. (It does so at once
        # here; a real cluster takes a moment.)
        if policy in ("Background", "Foreground"):
            self._collect(key[0], uid)
        details = {**_details("Job", key[1]), "uid": uid}
        status = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
                  "details": details}  # fmt: skip
        return web.json_response(status)

    def _collect(self, namespace: str, owner_uid: str) -> None:
        for store in (self.secrets, self.pods):
            for key, obj in list(store.items()):
                owners = obj["metadata"].get("ownerReferences") or []
                if key[0] == namespace and any(o.get("uid") == owner_uid for o in owners):
                    del store[key]
                    if obj.get("kind") == "Pod":
                        self._touch(obj)
                        self._notify(namespace, "DELETED", obj)

    async def _list_jobs(self, request: web.Request) -> web.StreamResponse:
        ns = request.match_info["ns"]
        selector = request.query.get("labelSelector")
        items = [j for (n, _), j in self.jobs.items() if n == ns and _matches(j, selector)]
        if request.query.get("watch") not in ("true", "1", "True"):
            return web.json_response(
                {"kind": "JobList", "apiVersion": "batch/v1", "metadata": self._list_meta(),
                 "items": items}
            )  # fmt: skip
        return await self._watch(request, "Job", ns, selector, items)

    async def _watch(
        self,
        request: web.Request,
        kind: str,
        ns: str,
        selector: str | None,
        items: list[dict[str, Any]],
    ) -> web.StreamResponse:
        queue: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue()
        since = request.query.get("resourceVersion")
        if since and since != "0":
            # From a resourceVersion: the changes after it, then live ones.
            for rv, namespace, frame in self._history:
                obj = frame["object"]
                later = rv > int(since) and namespace == ns and obj.get("kind") == kind
                if later and _matches(obj, selector):
                    queue.put_nowait(copy.deepcopy(frame))
        else:
            # Without one: the current objects as ADDED, then live changes.
            for item in items:
                queue.put_nowait({"type": "ADDED", "object": copy.deepcopy(item)})
        watcher = (kind, ns, selector, queue)
        self._watchers.append(watcher)
        response = web.StreamResponse()
        response.content_type = "application/json"
        await response.prepare(request)
        timeout = float(request.query.get("timeoutSeconds", "3600"))
        try:
            async for frame in _drain(queue, timeout):
                await response.write(json.dumps(frame).encode() + b"\n")
        except (ConnectionResetError, asyncio.CancelledError):
            pass
        finally:
            self._watchers.remove(watcher)
        with contextlib.suppress(ConnectionResetError):
            await response.write_eof()
        return response

    # -- secrets -----------------------------------------------------------------------------

    async def _create_secret(self, request: web.Request) -> web.Response:
        ns = request.match_info["ns"]
        name = request[JSON_BODY]["metadata"]["name"]
        if (ns, name) in self.secrets:
            return _already_exists("Secret", name)
        secret = self._new(request, "Secret")
        self.secrets[(ns, name)] = secret
        return web.json_response(secret, status=201)

    async def _get_secret(self, request: web.Request) -> web.Response:
        key = (request.match_info["ns"], request.match_info["name"])
        if key not in self.secrets:
            return _not_found("Secret", key[1])
        return web.json_response(self.secrets[key])

    # -- pods and logs -----------------------------------------------------------------------

    async def _list_pods(self, request: web.Request) -> web.StreamResponse:
        ns = request.match_info["ns"]
        selector = request.query.get("labelSelector")
        items = [p for (n, _), p in self.pods.items() if n == ns and _matches(p, selector)]
        if request.query.get("watch") in ("true", "1", "True"):
            return await self._watch(request, "Pod", ns, selector, items)
        body = {
            "kind": "PodList",
            "apiVersion": "v1",
            "metadata": self._list_meta(),
            "items": items,
        }
        return web.json_response(body)

    async def _pod_log(self, request: web.Request) -> web.StreamResponse:
        key = (request.match_info["ns"], request.match_info["name"])
        if key not in self.pods:
            return _not_found("Pod", key[1])
        follow = request.query.get("follow") in ("true", "1", "True")
        log = self._logs[key]
        response = web.StreamResponse()
        response.content_type = "text/plain"
        await response.prepare(request)
        sent = 0
        while True:
            async with log.changed:
                if sent == len(log.lines) and not log.done and follow:
                    await log.changed.wait()
                lines, done = log.lines[sent:], log.done
            for line in lines:
                await response.write(line.encode() + b"\n")
            sent += len(lines)
            if done or not follow:
                break
        await response.write_eof()
        return response


def _merge(target: dict[str, Any], patch: dict[str, Any]) -> None:
    """JSON merge patch (RFC 7386) of maps: null deletes, a map merges, anything else replaces."""
    for key, value in patch.items():
        if value is None:
            target.pop(key, None)
        elif isinstance(value, dict) and isinstance(target.get(key), dict):
            _merge(target[key], value)
        else:
            target[key] = copy.deepcopy(value)


def _default_job(job: dict[str, Any]) -> None:
    """What the API server adds to a Job it creates: generation, spec defaults, the
    controller-uid selector and the labels the Job controller matches its pods by."""
    meta, spec = job["metadata"], job.setdefault("spec", {})
    meta["generation"] = 1
    for key, value in JOB_SPEC_DEFAULTS.items():
        spec.setdefault(key, value)
    uid, name = meta["uid"], meta["name"]
    spec.setdefault("selector", {"matchLabels": {CONTROLLER_UID_LABEL: uid}})
    template = spec.setdefault("template", {}).setdefault("metadata", {})
    template["labels"] = {
        **(template.get("labels") or {}),
        CONTROLLER_UID_LABEL: uid, JOB_NAME_LABEL: name, "controller-uid": uid, "job-name": name,
    }  # fmt: skip
    job.setdefault("status", {})


async def _drain(
    queue: asyncio.Queue[dict[str, Any] | None], seconds: float
) -> AsyncIterator[dict[str, Any]]:
    loop = asyncio.get_running_loop()
    end = loop.time() + seconds
    while True:
        remaining = end - loop.time()
        if remaining <= 0:
            return
        try:
            frame = await asyncio.wait_for(queue.get(), timeout=remaining)
        except TimeoutError:
            return
        if frame is None:
            return
        yield frame


__all__ = ["JOB_NAME_LABEL", "FakeKubeApi", "Request"]
