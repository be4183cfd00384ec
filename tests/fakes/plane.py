"""A fake Plane (makeplane/plane REST API v1) over real HTTP, that also sends signed webhooks.

Rebuilt from Plane's own source, makeplane/plane ``apps/api`` at commit
4ca6d6c7b807ad09bb571af2c43e85bf47c3ec6b (2026-05-19), read, not copied: the webhook sender
``plane/bgtasks/webhook_task.py``, the serializers ``plane/api/serializers/{issue,state,user}.py``
and ``plane/app/serializers/issue.py``, the views ``plane/api/views/{issue,state,member,user}.py``
(REST) and ``plane/app/views/issue/{base,comment}.py`` (what the web app sends), the key check
``plane/api/middleware/api_authentication.py``, the throttle ``plane/api/rate_limit.py`` with
``plane/api/views/base.py`` and ``plane/authentication/adapter/exception.py``. The payload
shapes are in `tests.fakes.plane_shapes`; recorded examples in
services/plane-sync/tests/fixtures/plane_webhooks/.

- REST: ``/api/v1/workspaces/{slug}/projects/{project}/work-items/`` (and ``issues/``): list
  (cursor ``per_page:page:is_prev``), create (``external_id`` + ``external_source`` already
  used: 409 with the existing ``id``), GET by ``?external_id=&external_source=``, retrieve,
  PATCH (labels/assignees replace the set), DELETE; ``.../comments/`` likewise;
  ``states/``, ``labels/``, ``members/`` (project members: users only, no role);
  ``/api/v1/workspaces/{slug}/members/`` (workspace members, ``plane/api/views/member.py``
  ``WorkspaceMemberAPIEndpoint``: a plain list of users each with its workspace ``role``,
  20 admin, 15 member, 5 guest, ``plane/db/models/workspace.py``; `set_role` changes one);
  ``/api/v1/users/me/``. Work items answer in the API's shape: ``state``, ``labels``,
  ``assignees`` as ids.
- Auth: ``X-API-Key`` only (Plane's API has no bearer tokens): missing 401 "Authentication
  credentials were not provided.", wrong 401 "Given API token is not valid".
- Rate limit per key (DRF SimpleRateThrottle, 60 a minute): an allowed call carries
  ``X-RateLimit-Remaining`` and ``X-RateLimit-Reset`` = now + 60 s (not the window's end);
  a refused one is 429 with only ``Retry-After`` (DRF's wait, rounded up) and the body
  ``{"error_code": 5900, "error_message": "RATE_LIMIT_EXCEEDED"}``.
- Webhooks, as ``webhook_task.py`` sends them: action ``created`` / ``updated`` (one delivery
  per changed key, ``activity.field`` named as the caller sent it: ``state_id``,
  ``label_ids``, ``assignee_ids``, ``description_html``, ``name`` from the web app — the
  ``human_*`` methods —, ``state``, ``labels``, ... from the REST API); ``data`` is the
  object after the change, an issue with ``state`` as ``{id, name, color, group}`` and labels
  and assignees expanded; ``activity.actor`` a user object. Deleting a work item or a comment
  sends no webhook (at that commit only projects send ``deleted``, with ``data`` = ``{id}``).
- Faults: `down` (every call 503), `fail_next` (the next N calls answer a status),
  `delay` (seconds before answering: client timeouts).
- Edition switch `agent_runs`: with it, ``/api/v1/workspaces/{slug}/runs/`` and their
  ``activities/`` exist (Plane Cloud/commercial, not in the open source: these routes and
  their ``agent_run_*`` webhooks are not checked against source); without it they are 404.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import math
import time
import uuid
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import httpx
from aiohttp import web

from tests.fakes import plane_shapes as shapes
from tests.fakes.http import LocalHttpServer, ServedFake

DEFAULT_STATES = (
    ("Backlog", "backlog"),
    ("Todo", "unstarted"),
    ("In Progress", "started"),
    ("Done", "completed"),
    ("Cancelled", "cancelled"),
)
# Users as UserLiteSerializer shows them (ids are uuids in Plane).
BOT = {
    "id": "5b0c5c39-0000-4000-8000-00000000b07a", "first_name": "Nexus", "last_name": "Bot",
    "email": "bot@example.com", "avatar": "", "avatar_url": None, "display_name": "nexus-bot",
}  # fmt: skip
HUMAN = {
    "id": "5b0c5c39-0000-4000-8000-0000000000ad", "first_name": "Ada", "last_name": "Lovelace",
    "email": "ada@example.com", "avatar": "", "avatar_url": None, "display_name": "ada",
}  # fmt: skip
# The keys of a work item the API's IssueSerializer shows (an API PATCH of one of them that
# changes it sends a webhook; other keys send none).
API_ISSUE_KEYS = (
    "name", "description_html", "state", "priority", "labels", "assignees", "external_id",
    "external_source", "target_date", "start_date", "parent", "estimate_point", "is_draft",
)  # fmt: skip


# Workspace roles (plane/db/models/workspace.py ROLE_CHOICES).
ADMIN, MEMBER, GUEST = 20, 15, 5
_USER_LITE = ("id", "first_name", "last_name", "email", "avatar", "avatar_url", "display_name")


def _user_lite(user: dict[str, Any]) -> dict[str, Any]:
    return {k: user.get(k) for k in _USER_LITE}


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def _id() -> str:
    return str(uuid.uuid4())


@dataclass
class Webhook:
    url: str
    secret: str
    id: str = field(default_factory=_id)


@dataclass
class Delivery:
    """One webhook send: what was sent and what came back (None: no connection)."""

    delivery_id: str
    event: str
    body: bytes
    status: int | None


@dataclass
class FakePlane(ServedFake):
    """The fake server. ``async with`` starts it; its dicts are the state tests assert on."""

    api_key: str = "plane-test-key"
    workspace: str = "nexus"
    rate_limit: int = 60
    rate_window: float = 60.0
    agent_runs: bool = False
    down: bool = False
    delay: float = 0.0
    bot: dict[str, str] = field(default_factory=lambda: dict(BOT))
    project_id: str = field(default_factory=_id)
    # Workspace members and their roles (user id -> (UserLite, role)): the bot and ada admins.
    members: dict[str, tuple[dict[str, Any], int]] = field(default_factory=dict)
    workspace_id: str = field(default_factory=_id)
    work_items: dict[str, dict[str, Any]] = field(default_factory=dict)
    comments: dict[str, dict[str, Any]] = field(default_factory=dict)
    states: list[dict[str, Any]] = field(default_factory=list)
    labels: list[dict[str, Any]] = field(default_factory=list)
    runs: dict[str, dict[str, Any]] = field(default_factory=dict)
    activities: dict[str, dict[str, Any]] = field(default_factory=dict)
    webhooks: list[Webhook] = field(default_factory=list)
    deliveries: list[Delivery] = field(default_factory=list)
    # Every API call: (method, path, status) in arrival order.
    calls: list[tuple[str, str, int]] = field(default_factory=list)
    _fail: deque[int] = field(default_factory=deque)
    _hits: dict[str, deque[float]] = field(default_factory=dict)
    _sequence: int = 0
    _sends: set[asyncio.Task[None]] = field(default_factory=set)
    _http: LocalHttpServer = field(default_factory=LocalHttpServer)

    def __post_init__(self) -> None:
        if not self.states:
            self.states = [
                {
                    "id": _id(),
                    "name": n,
                    "group": g,
                    "color": "#60646C",
                    "project": self.project_id,
                    "workspace": self.workspace_id,
                }
                for n, g in DEFAULT_STATES
            ]
        for user in (self.bot, HUMAN):
            self.members.setdefault(user["id"], (user, ADMIN))

    # -- control -------------------------------------------------------------------------

    @property
    def url(self) -> str:
        return self._http.url

    def set_role(self, user: dict[str, Any], role: int) -> None:
        """Make `user` a workspace member of `role` (`ADMIN`, `MEMBER`, `GUEST`)."""
        self.members[user["id"]] = (user, role)

    def fail_next(self, count: int, status: int = 503) -> None:
        """The next `count` API calls answer `status` (before auth and rate limiting)."""
        self._fail.extend([status] * count)

    def add_webhook(self, url: str, secret: str) -> Webhook:
        hook = Webhook(url, secret)
        self.webhooks.append(hook)
        return hook

    async def settle(self) -> None:
        """Wait until every webhook send started so far has finished."""
        while self._sends:
            await asyncio.gather(*list(self._sends), return_exceptions=True)

    def state_named(self, name: str) -> dict[str, Any]:
        return next(s for s in self.states if s["name"] == name)

    def label(self, name: str) -> dict[str, Any]:
        """The label called `name`, created if missing."""
        for lab in self.labels:
            if lab["name"] == name:
                return lab
        lab = {
            "id": _id(), "name": name, "color": "#888888", "project": self.project_id,
            "workspace": self.workspace_id,
        }  # fmt: skip
        self.labels.append(lab)
        return lab

    def comments_of(self, work_item_id: str) -> list[dict[str, Any]]:
        return [c for c in self.comments.values() if c["issue"] == work_item_id]

    def by_external_id(self, external_id: str) -> dict[str, Any] | None:
        return next(
            (w for w in self.work_items.values() if w.get("external_id") == external_id), None
        )

    # -- a person using Plane's web app (changes that send webhooks, actor = HUMAN) ---------
    # The web app names its edits as IssueDetailSerializer does (state_id, label_ids,
    # assignee_ids); the REST API as IssueSerializer does (state, labels, assignees).

    def human_create_work_item(self, name: str, labels: list[str] = (), **extra: Any) -> str:  # type: ignore[assignment]
        item = self._new_work_item(
            {"name": name, "labels": [self.label(n)["id"] for n in labels], **extra}, HUMAN
        )
        self._emit("issue", "created", self._expand(item), HUMAN)
        return str(item["id"])

    def human_set_labels(self, work_item_id: str, labels: list[str]) -> None:
        self._human_edit(work_item_id, {"labels": [self.label(n)["id"] for n in labels]})

    def human_update(self, work_item_id: str, **fields: Any) -> None:
        """A person edits fields (``name``, ``state``, ``description_html``, ...; ``state``
        is a state id): one delivery per changed field, as Plane sends them."""
        self._human_edit(work_item_id, fields)

    def human_assign(self, work_item_id: str, user_ids: list[str]) -> None:
        self._human_edit(work_item_id, {"assignees": list(user_ids)})

    def human_comment(self, work_item_id: str, text: str, actor: dict[str, str] = HUMAN) -> str:
        """A person (`HUMAN` unless another member is named) comments on a work item."""
        comment = self._new_comment(work_item_id, {"comment_html": f"<p>{text}</p>"}, actor)
        self._emit("issue_comment", "created", self._comment_data(comment), actor)
        return str(comment["id"])

    def human_edit_comment(self, comment_id: str, text: str) -> None:
        comment = self.comments[comment_id]
        old, comment["comment_html"] = comment["comment_html"], f"<p>{text}</p>"
        comment["edited_at"] = comment["updated_at"] = _now()
        comment["updated_by"] = HUMAN["id"]
        self._emit(
            "issue_comment", "updated", self._comment_data(comment), HUMAN,
            field="comment_html", old=old, new=comment["comment_html"],
        )  # fmt: skip

    def human_delete_work_item(self, work_item_id: str) -> None:
        """Plane sends no webhook for a deleted work item (nor for a deleted comment)."""
        del self.work_items[work_item_id]

    def _human_edit(self, work_item_id: str, fields: dict[str, Any]) -> None:
        web = {shapes.WEB_APP_FIELD.get(k, k): k for k in fields}
        self._edit(self.work_items[work_item_id], fields, HUMAN, keys=web)

    def _edit(
        self,
        item: dict[str, Any],
        fields: dict[str, Any],
        actor: dict[str, Any],
        *,
        keys: dict[str, str] | None = None,
    ) -> None:
        """Change `fields` of `item` and send one webhook per changed one (model_activity),
        named by `keys` (the caller's name -> the item's attribute; default the same)."""
        changed = []
        for key, name in (keys or {k: k for k in fields}).items():
            value = fields[name]
            if name == "labels":
                known = {lab["id"] for lab in self.labels}
                value = [v for v in fields[name] if v in known]
            if item.get(name) != value:
                changed.append((key, item.get(name), value))
                item[name] = value
        item["updated_at"], item["updated_by"] = _now(), actor["id"]
        for key, old, new in changed:
            self._emit("issue", "updated", self._expand(item), actor, field=key, old=old, new=new)

    def human_stop_run(self, run_id: str) -> None:
        """A person presses stop on a native agent run: a prompt activity, signal `stop`."""
        run = self.runs[run_id]
        prompt = {"type": "prompt", "content": {"type": "prompt", "body": "stop"}, "signal": "stop"}
        activity = self._new_activity(run, prompt, HUMAN)
        run["status"] = "stopping"
        self._emit("agent_run_user_prompt", "create", {**activity, "issue": run["issue"]}, HUMAN)

    # -- the HTTP API --------------------------------------------------------------------

    def _app(self) -> web.Application:
        app = web.Application(middlewares=[self._middleware])
        ws = "/api/v1/workspaces/{slug}"
        pr = ws + "/projects/{project}"
        r = app.router
        r.add_get("/api/v1/users/me/", self._me)
        for kind in ("work-items", "issues"):
            r.add_get(f"{pr}/{kind}/", self._list_items)
            r.add_post(f"{pr}/{kind}/", self._create_item)
            r.add_get(pr + f"/{kind}/{{item}}/", self._get_item)
            r.add_patch(pr + f"/{kind}/{{item}}/", self._patch_item)
            r.add_delete(pr + f"/{kind}/{{item}}/", self._delete_item)
            r.add_get(pr + f"/{kind}/{{item}}/comments/", self._list_comments)
            r.add_post(pr + f"/{kind}/{{item}}/comments/", self._create_comment)
            r.add_patch(pr + f"/{kind}/{{item}}/comments/{{comment}}/", self._patch_comment)
        r.add_get(pr + "/states/", self._list_states)
        r.add_get(pr + "/labels/", self._list_labels)
        r.add_post(pr + "/labels/", self._create_label)
        r.add_get(pr + "/members/", self._members)
        r.add_get(ws + "/members/", self._workspace_members)
        r.add_post(ws + "/runs/", self._create_run)
        r.add_get(ws + "/runs/{run}/", self._get_run)
        r.add_get(ws + "/runs/{run}/activities/", self._list_activities)
        r.add_post(ws + "/runs/{run}/activities/", self._create_activity)
        return app

    @web.middleware
    async def _middleware(self, request: web.Request, handler: Any) -> web.StreamResponse:
        response = await self._answer(request, handler)
        self.calls.append((request.method, request.path, response.status))
        return response

    async def _answer(self, request: web.Request, handler: Any) -> web.StreamResponse:
        if self.delay:
            await asyncio.sleep(self.delay)
        if self.down:
            return web.json_response({"error": "down"}, status=503)
        if self._fail:
            return web.json_response({"error": "injected"}, status=self._fail.popleft())
        key = request.headers.get("X-Api-Key")
        if not key:
            return web.json_response(
                {"detail": "Authentication credentials were not provided."}, status=401
            )
        if key != self.api_key:
            return web.json_response({"detail": "Given API token is not valid"}, status=401)
        if request.match_info.get("slug") not in (None, self.workspace):
            return web.json_response({"error": "Workspace not found"}, status=404)
        if request.match_info.get("project") not in (None, self.project_id):
            return web.json_response({"error": "Project not found"}, status=404)
        # DRF's SimpleRateThrottle: the key's calls of the last window; a refusal records none.
        hits = self._hits.setdefault(key, deque())
        now = time.time()
        while hits and hits[0] <= now - self.rate_window:
            hits.popleft()
        if len(hits) >= self.rate_limit:
            left = self.rate_window - (now - hits[0])
            wait = math.ceil(left / (self.rate_limit - len(hits) + 1))
            return web.json_response(
                shapes.rate_limited(), status=429, headers={"Retry-After": str(wait)}
            )
        hits.append(now)
        try:
            response: web.StreamResponse = await handler(request)
        except web.HTTPException as exc:  # answered as JSON, like Django REST framework
            response = web.Response(
                status=exc.status, text=exc.text, content_type="application/json"
            )
        # plane/api/rate_limit.py: the reset is always a full window from now.
        response.headers["X-RateLimit-Remaining"] = str(max(0, self.rate_limit - len(hits)))
        response.headers["X-RateLimit-Reset"] = str(int(now + self.rate_window))
        return response

    async def _me(self, request: web.Request) -> web.Response:
        return web.json_response(self.bot)

    # work items

    async def _list_items(self, request: web.Request) -> web.Response:
        q = request.query
        if "external_id" in q or "external_source" in q:
            found = next(
                (
                    w for w in self.work_items.values()
                    if w.get("external_id") == q.get("external_id")
                    and w.get("external_source") == q.get("external_source")
                ),
                None,
            )  # fmt: skip
            if found is None:
                return web.json_response({"error": "Issue not found"}, status=404)
            return web.json_response(found)
        return _page(list(self.work_items.values()), q)

    async def _create_item(self, request: web.Request) -> web.Response:
        body = await _json(request)
        if not isinstance(body.get("name"), str) or not body["name"] or len(body["name"]) > 255:
            return web.json_response({"name": ["This field is required."]}, status=400)
        ext_id, ext_src = body.get("external_id"), body.get("external_source")
        if ext_id and ext_src:
            for w in self.work_items.values():
                if w.get("external_id") == ext_id and w.get("external_source") == ext_src:
                    return web.json_response(
                        {"error": "Issue with the same external id and external source already"
                         " exists", "id": w["id"]},
                        status=409,
                    )  # fmt: skip
        item = self._new_work_item(body, self.bot)
        self._emit("issue", "created", self._expand(item), self.bot)
        return web.json_response(item, status=201)

    async def _get_item(self, request: web.Request) -> web.Response:
        return web.json_response(self._item(request))

    async def _patch_item(self, request: web.Request) -> web.Response:
        item = self._item(request)
        body = await _json(request)
        self._edit(item, {k: v for k, v in body.items() if k in API_ISSUE_KEYS}, self.bot)
        return web.json_response(item)

    async def _delete_item(self, request: web.Request) -> web.Response:
        item = self._item(request)
        del self.work_items[item["id"]]  # no webhook: Plane sends none for this
        return web.Response(status=204)

    # comments

    async def _list_comments(self, request: web.Request) -> web.Response:
        item = self._item(request)
        return _page([self._comment_data(c) for c in self.comments_of(item["id"])], request.query)

    async def _create_comment(self, request: web.Request) -> web.Response:
        item = self._item(request)
        body = await _json(request)
        ext_id, ext_src = body.get("external_id"), body.get("external_source")
        if ext_id and ext_src:
            for c in self.comments_of(item["id"]):
                if c.get("external_id") == ext_id and c.get("external_source") == ext_src:
                    return web.json_response(
                        {"error": "Issue Comment with the same external id and external source"
                         " already exists", "id": c["id"]},
                        status=409,
                    )  # fmt: skip
        comment = self._new_comment(item["id"], body, self.bot)
        self._emit("issue_comment", "created", self._comment_data(comment), self.bot)
        return web.json_response(self._comment_data(comment), status=201)

    async def _patch_comment(self, request: web.Request) -> web.Response:
        self._item(request)
        comment = self.comments.get(request.match_info["comment"])
        if comment is None:
            raise web.HTTPNotFound(text='{"error": "Comment not found"}')
        body = await _json(request)
        if "comment_html" in body and body["comment_html"] != comment["comment_html"]:
            old, comment["comment_html"] = comment["comment_html"], body["comment_html"]
            comment["edits"] = comment.get("edits", 0) + 1
            comment["edited_at"] = comment["updated_at"] = _now()
            self._emit(
                "issue_comment", "updated", self._comment_data(comment), self.bot,
                field="comment_html", old=old, new=comment["comment_html"],
            )  # fmt: skip
        return web.json_response(self._comment_data(comment))

    # states, labels, members

    async def _list_states(self, request: web.Request) -> web.Response:
        return _page(self.states, request.query)

    async def _list_labels(self, request: web.Request) -> web.Response:
        return _page(self.labels, request.query)

    async def _create_label(self, request: web.Request) -> web.Response:
        body = await _json(request)
        if any(lab["name"] == body.get("name") for lab in self.labels):
            return web.json_response({"error": "Label already exists"}, status=409)
        return web.json_response(self.label(str(body.get("name"))), status=201)

    async def _members(self, request: web.Request) -> web.Response:
        return web.json_response([self.bot, HUMAN])

    async def _workspace_members(self, request: web.Request) -> web.Response:
        """UserLiteSerializer of each member plus its ``role``, unpaginated."""
        users = [{**_user_lite(u), "role": role} for u, role in self.members.values()]
        return web.json_response(users)

    # native agent runs (commercial editions)

    def _runs_enabled(self) -> None:
        if not self.agent_runs:
            raise web.HTTPNotFound(text='{"error": "Page not found"}')

    async def _create_run(self, request: web.Request) -> web.Response:
        self._runs_enabled()
        body = await _json(request)
        if not body.get("agent_slug"):
            return web.json_response({"agent_slug": ["This field is required."]}, status=400)
        run = {
            "id": _id(), "agent_user": self.bot["id"], "creator": self.bot["id"],
            "workspace": self.workspace, "project": body.get("project"),
            "issue": body.get("issue"), "comment": body.get("comment"),
            "external_link": body.get("external_link"), "status": "created",
            "type": body.get("type") or "comment_thread", "started_at": _now(),
            "agent_slug": body["agent_slug"], "created_at": _now(),
        }  # fmt: skip
        self.runs[run["id"]] = run
        self._emit("agent_run_create", "create", run, self.bot)
        return web.json_response(run, status=201)

    def _run(self, request: web.Request) -> dict[str, Any]:
        self._runs_enabled()
        run = self.runs.get(request.match_info["run"])
        if run is None:
            raise web.HTTPNotFound(text='{"error": "Run not found"}')
        return run

    async def _get_run(self, request: web.Request) -> web.Response:
        return web.json_response(self._run(request))

    async def _list_activities(self, request: web.Request) -> web.Response:
        run = self._run(request)
        mine = [a for a in self.activities.values() if a["agent_run"] == run["id"]]
        return _page(mine, request.query)

    async def _create_activity(self, request: web.Request) -> web.Response:
        run = self._run(request)
        body = await _json(request)
        kind = body.get("type")
        if kind not in ("action", "elicitation", "error", "response", "thought"):
            return web.json_response({"type": ["Invalid activity type."]}, status=400)
        activity = self._new_activity(run, body, self.bot)
        # The run's status follows its activities, as Plane does.
        run["status"] = {
            "elicitation": "awaiting", "response": "completed", "error": "failed",
        }.get(kind, "in_progress")  # fmt: skip
        return web.json_response(activity, status=201)

    # -- state ---------------------------------------------------------------------------

    def _item(self, request: web.Request) -> dict[str, Any]:
        item = self.work_items.get(request.match_info["item"])
        if item is None:
            raise web.HTTPNotFound(text='{"error": "Issue not found"}')
        return item

    def _new_work_item(self, body: dict[str, Any], actor: dict[str, str]) -> dict[str, Any]:
        """A work item in the REST shape (the API's IssueSerializer)."""
        self._sequence += 1
        known = {lab["id"] for lab in self.labels}
        item = {
            "id": _id(), "name": body["name"], "description_html": body.get("description_html")
            or "<p></p>", "description_binary": None, "state": body.get("state")
            or self.states[0]["id"], "priority": body.get("priority") or "none",
            "labels": [v for v in body.get("labels") or [] if v in known],
            "assignees": list(body.get("assignees") or []), "sequence_id": self._sequence,
            "external_id": body.get("external_id"), "external_source": body.get("external_source"),
            "parent": body.get("parent"), "estimate_point": None, "point": None,
            "start_date": body.get("start_date"), "target_date": body.get("target_date"),
            "sort_order": 65535.0 * self._sequence, "completed_at": None, "archived_at": None,
            "is_draft": False, "type": None, "project": self.project_id,
            "workspace": self.workspace_id, "created_at": _now(), "updated_at": _now(),
            "deleted_at": None, "created_by": actor["id"], "updated_by": actor["id"],
        }  # fmt: skip
        self.work_items[item["id"]] = item
        return item

    def _new_comment(
        self, work_item_id: str, body: dict[str, Any], actor: dict[str, str]
    ) -> dict[str, Any]:
        comment = {
            "id": _id(), "issue": work_item_id, "project": self.project_id,
            "workspace": self.workspace_id, "comment_html": body.get("comment_html") or "<p></p>",
            "description": None, "attachments": [], "external_id": body.get("external_id"),
            "external_source": body.get("external_source"), "access": body.get("access")
            or "INTERNAL", "actor": actor["id"], "parent": None, "edited_at": None,
            "created_by": actor["id"], "updated_by": actor["id"], "created_at": _now(),
            "updated_at": _now(), "deleted_at": None,
        }  # fmt: skip
        self.comments[comment["id"]] = comment
        return comment

    @staticmethod
    def _comment_data(comment: dict[str, Any]) -> dict[str, Any]:
        """IssueCommentSerializer: the comment without the fake's own bookkeeping."""
        return {k: v for k, v in comment.items() if k != "edits"}

    def _new_activity(
        self, run: dict[str, Any], body: dict[str, Any], actor: dict[str, str]
    ) -> dict[str, Any]:
        activity = {
            "id": _id(), "agent_run": run["id"], "type": body["type"],
            "content": body.get("content") or {}, "signal": body.get("signal") or "continue",
            "signal_metadata": body.get("signal_metadata"), "ephemeral": False,
            "actor": actor["id"], "workspace": self.workspace, "project": run.get("project"),
            "created_at": _now(),
        }  # fmt: skip
        self.activities[activity["id"]] = activity
        return activity

    def _expand(self, item: dict[str, Any]) -> dict[str, Any]:
        """A work item as a webhook carries it (IssueExpandSerializer)."""
        return shapes.issue_expand(
            item,
            states={st["id"]: st for st in self.states},
            labels={lab["id"]: lab for lab in self.labels},
            users={u["id"]: u for u in (self.bot, HUMAN)},
        )

    # -- webhooks ------------------------------------------------------------------------

    def _emit(
        self,
        event: str,
        action: str,
        data: dict[str, Any],
        actor: dict[str, Any],
        *,
        field: str | None = None,
        old: Any = None,
        new: Any = None,
    ) -> None:
        for hook in self.webhooks:
            payload = shapes.webhook_body(
                event, action, webhook_id=hook.id, workspace_id=self.workspace_id, data=data,
                actor=actor, field=field, old=old, new=new,
            )  # fmt: skip
            # Plane signs json.dumps(payload) and posts the same text (requests' json=).
            body = json.dumps(payload).encode()
            task = asyncio.get_running_loop().create_task(self._send(hook, event, body))
            self._sends.add(task)
            task.add_done_callback(self._sends.discard)

    async def _send(self, hook: Webhook, event: str, body: bytes) -> None:
        delivery = _id()
        signature = hmac.new(hook.secret.encode(), body, hashlib.sha256).hexdigest()
        headers = {
            "Content-Type": "application/json",
            "X-Plane-Event": event,
            "X-Plane-Delivery": delivery,
            "X-Plane-Signature": signature,
            "User-Agent": "Autopilot",
        }
        status: int | None
        try:
            async with httpx.AsyncClient(timeout=10) as client:
                status = (await client.post(hook.url, content=body, headers=headers)).status_code
        except httpx.HTTPError:
            status = None
        self.deliveries.append(Delivery(delivery, event, body, status))


async def _json(request: web.Request) -> dict[str, Any]:
    try:
        body = await request.json()
    except json.JSONDecodeError:
        raise web.HTTPBadRequest(text='{"error": "Invalid JSON"}') from None
    if not isinstance(body, dict):
        raise web.HTTPBadRequest(text='{"error": "Expected an object"}')
    return body


def _page(rows: list[dict[str, Any]], query: Any) -> web.Response:
    """Plane's cursor pagination: ``cursor=per_page:page:is_prev`` (page from 0)."""
    per_page = int(query.get("per_page", 100))
    page = 0
    if query.get("cursor"):
        per_page, page, _ = (int(x) for x in str(query["cursor"]).split(":"))
    start = page * per_page
    chunk = rows[start : start + per_page]
    pages = max(1, -(-len(rows) // per_page))
    return web.json_response(
        {
            "grouped_by": None, "sub_grouped_by": None, "total_count": len(rows),
            "next_cursor": f"{per_page}:{page + 1}:0", "prev_cursor": f"{per_page}:{page - 1}:1",
            "next_page_results": start + per_page < len(rows), "prev_page_results": page > 0,
            "count": len(chunk), "total_pages": pages, "total_results": len(rows),
            "extra_stats": None, "results": chunk,
        }
    )  # fmt: skip
