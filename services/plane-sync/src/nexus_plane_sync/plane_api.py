"""Plane's REST API v1 as plane-sync uses it: async httpx, retries, the shared rate limit.

Every call waits for a token of the shared `TokenBucket`, retries transient failures (network
errors, timeouts, 5xx, 429) with exponential backoff and jitter (tenacity), honours a 429's
``Retry-After`` by blocking the bucket, and translates the rest:
`PlaneUnavailable` when Plane stays away, `PlaneRejected` for a 4xx. A 409 on a create is
not an error: Plane answers it with the id of the object that has the same external id, which
is how creates are idempotent.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import httpx
from tenacity import (
    AsyncRetrying,
    retry_if_exception_type,
    stop_after_attempt,
    wait_exponential_jitter,
)

from nexus_plane_sync.errors import PlaneRejected, PlaneUnavailable
from nexus_plane_sync.ratelimit import TokenBucket

log = logging.getLogger(__name__)

EXTERNAL_SOURCE = "nexus"  # external_source of everything plane-sync creates
# A reset header larger than this is a Unix time, smaller a number of seconds.
_EPOCH = 1_000_000_000
# Workspace roles as Plane numbers them (plane/db/models/workspace.py ROLE_CHOICES).
ROLE_NAMES = {20: "admin", 15: "member", 5: "guest"}
# How long the member list answers role questions: a burst of comments costs one call, and a
# role change in Plane counts within a minute.
MEMBERS_TTL = 60.0


def role_names(role: object) -> frozenset[str]:
    """The names a ``plane:role:`` principal may use for a Plane role number: its name and
    the number itself (``{"admin", "20"}``); nothing for what is not a role."""
    if isinstance(role, bool) or not isinstance(role, int | str):
        return frozenset()
    try:
        number = int(role)
    except ValueError:
        return frozenset()
    name = ROLE_NAMES.get(number)
    return frozenset({name, str(number)}) if name else frozenset({str(number)})


class _Transient(Exception):  # noqa: N818 - internal retry signal
    def __init__(self, message: str, wait: float = 0.0) -> None:
        super().__init__(message)
        self.wait = wait


@dataclass(frozen=True)
class Created:
    """The id of an object a create made or found (`existed`: Plane had it, 409)."""

    id: str
    existed: bool


def reset_seconds(headers: httpx.Headers, now: float | None = None) -> float:
    """Seconds to wait after a 429 (1 if it says nothing). Plane's 429 carries only
    ``Retry-After`` (Django REST framework's throttle wait, plane/api/rate_limit.py); its
    ``X-RateLimit-Reset`` is on allowed answers only and always now + 60 s, so it is read
    only when a 429 has no ``Retry-After`` (a proxy in front may add one)."""
    now = time.time() if now is None else now
    for name in ("Retry-After", "X-RateLimit-Reset"):
        value = headers.get(name)
        if value is None:
            continue
        try:
            number = float(value)
        except ValueError:
            continue
        return max(0.0, number - now if number > _EPOCH else number)
    return 1.0


class PlaneApi:
    """One workspace and project of one Plane server."""

    def __init__(
        self,
        base_url: str,
        api_key: str,
        workspace: str,
        project_id: str,
        *,
        bucket: TokenBucket,
        timeout: float = 10.0,
        retries: int = 4,
        retry_max: float = 30.0,
    ) -> None:
        self.workspace = workspace
        self.project_id = project_id
        self.bucket = bucket
        self.retries = retries
        self.retry_max = retry_max
        self.reachable = True
        self.last_error: str | None = None
        self.requests = 0
        self._client = httpx.AsyncClient(
            base_url=base_url.rstrip("/") + "/api/v1/",
            headers={"X-API-Key": api_key, "Accept": "application/json"},
            timeout=timeout,
        )
        self._states: dict[str, str] | None = None
        self._state_names: dict[str, str] = {}  # state id -> casefolded name
        self._labels: dict[str, str] | None = None
        self._roles: dict[str, int] = {}  # user id -> workspace role
        self._roles_at: float | None = None  # monotonic time of the last member list

    async def close(self) -> None:
        await self._client.aclose()

    # -- paths -----------------------------------------------------------------------------

    @property
    def _project(self) -> str:
        return f"workspaces/{self.workspace}/projects/{self.project_id}/"

    def _items(self, item: str | None = None) -> str:
        return self._project + "work-items/" + (f"{item}/" if item else "")

    def _runs(self, run: str | None = None) -> str:
        return f"workspaces/{self.workspace}/runs/" + (f"{run}/" if run else "")

    # -- the one way to call -----------------------------------------------------------------

    async def call(
        self,
        method: str,
        path: str,
        *,
        json: Any = None,
        params: dict[str, str] | None = None,
        ok: tuple[int, ...] = (),
    ) -> httpx.Response:
        """Send one request (retried); a 2xx or a status in `ok` is returned, any other 4xx
        raises `PlaneRejected`, and Plane staying away `PlaneUnavailable`."""
        retrying = AsyncRetrying(
            stop=stop_after_attempt(self.retries + 1),
            wait=wait_exponential_jitter(multiplier=0.5, max=self.retry_max),
            retry=retry_if_exception_type(_Transient),
            reraise=True,
        )
        try:
            async for attempt in retrying:
                with attempt:
                    return await self._once(method, path, json, params, ok)
        except _Transient as exc:
            self.reachable = "unreachable" not in str(exc)
            self.last_error = str(exc)
            raise PlaneUnavailable(f"{method} {path}: {exc}") from exc
        raise AssertionError("unreachable: tenacity either returns or raises")  # pragma: no cover

    async def _once(
        self,
        method: str,
        path: str,
        json: Any,
        params: dict[str, str] | None,
        ok: tuple[int, ...],
    ) -> httpx.Response:
        await self.bucket.acquire()
        self.requests += 1
        try:
            response = await self._client.request(method, path, json=json, params=params)
        except httpx.TransportError as exc:  # connect, read, timeouts
            raise _Transient(f"unreachable ({type(exc).__name__}: {exc})") from exc
        self.reachable = True
        status = response.status_code
        if status == 429:
            wait = reset_seconds(response.headers)
            self.bucket.block_for(wait)
            log.warning("Plane rate limit hit on %s %s; pausing %.1f s", method, path, wait)
            raise _Transient(f"rate limited (429), reset in {wait:.1f}s", wait)
        if status >= 500:
            raise _Transient(f"server error {status}")
        if 200 <= status < 300 or status in ok:
            return response
        self.last_error = f"{status} on {method} {path}: {response.text[:200]}"
        raise PlaneRejected(status, f"{method} {path}: {response.text[:500]}")

    async def pages(self, path: str, per_page: int = 100) -> AsyncIterator[dict[str, Any]]:
        """Every row of a paginated list (cursor ``per_page:page:is_prev``)."""
        cursor = f"{per_page}:0:0"
        while True:
            body = (await self.call("GET", path, params={"cursor": cursor})).json()
            if isinstance(body, list):  # a few endpoints answer a plain list
                for row in body:
                    yield row
                return
            for row in body.get("results", []):
                yield row
            if not body.get("next_page_results"):
                return
            cursor = body["next_cursor"]

    # -- who we are ----------------------------------------------------------------------------

    async def me(self) -> dict[str, Any]:
        body: dict[str, Any] = (await self.call("GET", "users/me/")).json()
        return body

    # -- who is who in the workspace (cached for MEMBERS_TTL) --------------------------------

    async def workspace_role(self, user_id: str) -> int | None:
        """`user_id`'s workspace role number (None: not a member). From the workspace member
        list (``GET workspaces/{slug}/members/``, users with ``role``: the project member
        list carries no roles), fetched at most once a `MEMBERS_TTL`. Raises
        `PlaneUnavailable` / `PlaneRejected` when Plane cannot say (a guest's key gets 403)."""
        now = time.monotonic()
        if self._roles_at is None or now - self._roles_at >= MEMBERS_TTL:
            rows = [r async for r in self.pages(f"workspaces/{self.workspace}/members/")]
            self._roles = {
                str(r["id"]): r["role"]
                for r in rows
                if r.get("id") and isinstance(r.get("role"), int)
            }
            self._roles_at = now
        return self._roles.get(user_id)

    # -- states and labels (cached: they change rarely; a miss refreshes) ------------------

    async def state_id(self, name: str) -> str | None:
        for refresh in (False, True):
            if self._states is None or refresh:
                self._states = {
                    s["name"].casefold(): s["id"]
                    async for s in self.pages(self._project + "states/")
                }
                self._state_names = {s_id: n for n, s_id in self._states.items()}
            found = self._states.get(name.casefold())
            if found is not None:
                return found
        return None

    async def state_name(self, state_id: str) -> str | None:
        """The casefolded name of the state `state_id` (None: Plane has no such state)."""
        for refresh in (False, True):
            if self._states is None or refresh:
                self._states = {
                    s["name"].casefold(): s["id"]
                    async for s in self.pages(self._project + "states/")
                }
                self._state_names = {s_id: name for name, s_id in self._states.items()}
            found = self._state_names.get(state_id)
            if found is not None:
                return found
        return None

    async def label_ids(self, names: list[str]) -> list[str]:
        """Ids of the labels called `names`; missing ones are created."""
        if self._labels is None:
            self._labels = {
                lab["name"]: lab["id"] async for lab in self.pages(self._project + "labels/")
            }
        ids = []
        for name in names:
            if name not in self._labels:
                created = await self.call(
                    "POST", self._project + "labels/", json={"name": name}, ok=(409,)
                )
                if created.status_code == 409:
                    self._labels = None
                    return await self.label_ids(names)
                self._labels[name] = created.json()["id"]
            ids.append(self._labels[name])
        return ids

    async def label_names(self, ids: list[str]) -> list[str]:
        if self._labels is None or any(i not in self._labels.values() for i in ids):
            self._labels = {
                lab["name"]: lab["id"] async for lab in self.pages(self._project + "labels/")
            }
        by_id = {v: k for k, v in self._labels.items()}
        return [by_id[i] for i in ids if i in by_id]

    # -- work items ----------------------------------------------------------------------------

    async def find_work_item(self, external_id: str) -> str | None:
        response = await self.call(
            "GET",
            self._items(),
            params={"external_id": external_id, "external_source": EXTERNAL_SOURCE},
            ok=(404,),
        )
        if response.status_code == 404:
            return None
        return str(response.json()["id"])

    async def create_work_item(self, body: dict[str, Any]) -> Created:
        response = await self.call("POST", self._items(), json=body, ok=(409,))
        return Created(str(response.json()["id"]), existed=response.status_code == 409)

    async def update_work_item(self, item: str, body: dict[str, Any]) -> None:
        await self.call("PATCH", self._items(item), json=body)

    async def delete_work_item(self, item: str) -> None:
        await self.call("DELETE", self._items(item), ok=(404,))

    # -- comments ------------------------------------------------------------------------------

    async def create_comment(self, item: str, html: str, external_id: str) -> Created:
        response = await self.call(
            "POST",
            self._items(item) + "comments/",
            json={
                "comment_html": html,
                "external_id": external_id,
                "external_source": EXTERNAL_SOURCE,
            },
            ok=(409,),
        )
        return Created(str(response.json()["id"]), existed=response.status_code == 409)

    async def update_comment(self, item: str, comment: str, html: str) -> None:
        await self.call(
            "PATCH", self._items(item) + f"comments/{comment}/", json={"comment_html": html}
        )

    # -- native agent runs (Plane Cloud / commercial editions) ---------------------------

    async def has_agent_runs(self) -> bool:
        """Whether the server has native agent runs: an empty create is a 400 there and a 404
        where the endpoint does not exist (the open-source edition)."""
        response = await self.call("POST", self._runs(), json={}, ok=(400, 404, 405))
        return response.status_code != 404

    async def create_agent_run(self, agent_slug: str, item: str) -> str:
        response = await self.call(
            "POST",
            self._runs(),
            json={
                "agent_slug": agent_slug,
                "issue": item,
                "project": self.project_id,
                "type": "comment_thread",
            },
        )
        return str(response.json()["id"])

    async def create_activity(self, run: str, body: dict[str, Any]) -> str:
        response = await self.call("POST", self._runs(run) + "activities/", json=body)
        return str(response.json()["id"])

    async def activities(self, run: str) -> list[dict[str, Any]]:
        return [a async for a in self.pages(self._runs(run) + "activities/")]
