"""A fake GitHub REST API: just the pull-request calls the runner makes, over real HTTP.

``POST /repos/{owner}/{repo}/pulls`` opens a pull request (201), or answers 422 like
GitHub does when an open pull request for the same head and base already exists.
``GET /repos/{owner}/{repo}/pulls?head=owner:branch&state=open`` lists them. Every request
must carry ``Authorization: Bearer <token>`` (or ``token <token>``); anything else is a 401.
Requests are recorded for assertions.

    async with FakeGitHub(token="t") as gh:
        provider = GitHubProvider("t", gh.api_url)
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from tests.fakes.http import LocalHttpServer, ServedFake


@dataclass
class PullRequest:
    owner: str
    repo: str
    number: int
    title: str
    body: str
    head: str
    base: str
    state: str = "open"

    def as_json(self, api_url: str) -> dict[str, Any]:
        html = f"https://github.example/{self.owner}/{self.repo}/pull/{self.number}"
        return {
            "number": self.number,
            "state": self.state,
            "title": self.title,
            "body": self.body,
            "html_url": html,
            "url": f"{api_url}/repos/{self.owner}/{self.repo}/pulls/{self.number}",
            "head": {"ref": self.head, "label": f"{self.owner}:{self.head}"},
            "base": {"ref": self.base},
        }


@dataclass
class Recorded:
    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    body: Any = None


@dataclass
class FakeGitHub(ServedFake):
    """The fake server. ``async with`` starts it; `pulls` and `requests` are its state.

    `stale_lists` makes the next N list calls answer ``[]`` even when a pull request exists
    (GitHub's search is eventually consistent), so a client meets the 422 path.
    """

    token: str = "test-token"
    pulls: list[PullRequest] = field(default_factory=list)
    requests: list[Recorded] = field(default_factory=list)
    stale_lists: int = 0
    _http: LocalHttpServer = field(default_factory=LocalHttpServer)
    _numbers: itertools.count[int] = field(default_factory=lambda: itertools.count(1))

    def _app(self) -> web.Application:
        app = web.Application(middlewares=[self._record_and_auth])
        app.router.add_post("/repos/{owner}/{repo}/pulls", self._create)
        app.router.add_get("/repos/{owner}/{repo}/pulls", self._list)
        return app

    @property
    def api_url(self) -> str:
        return self._http.url

    def created(self) -> list[Recorded]:
        """The POST (create) requests received."""
        return [r for r in self.requests if r.method == "POST"]

    # -- handlers --------------------------------------------------------------------------

    @web.middleware
    async def _record_and_auth(self, request: web.Request, handler: Any) -> web.StreamResponse:
        body = await request.json() if request.can_read_body else None
        self.requests.append(
            Recorded(request.method, request.path, dict(request.query), dict(request.headers), body)
        )
        auth = request.headers.get("Authorization", "")
        if auth not in (f"Bearer {self.token}", f"token {self.token}"):
            return web.json_response(
                {"message": "Bad credentials", "status": "401"},
                status=401,
            )
        resp: web.StreamResponse = await handler(request)
        return resp

    def _open(self, owner: str, repo: str, head: str, base: str | None) -> list[PullRequest]:
        return [
            p
            for p in self.pulls
            if (p.owner, p.repo, p.head, p.state) == (owner, repo, head, "open")
            and (base is None or p.base == base)
        ]

    async def _list(self, request: web.Request) -> web.Response:
        owner, repo = request.match_info["owner"], request.match_info["repo"]
        state = request.query.get("state", "open")
        head = request.query.get("head")
        if self.stale_lists > 0:
            self.stale_lists -= 1
            return web.json_response([])
        found = [p for p in self.pulls if (p.owner, p.repo) == (owner, repo)]
        if state != "all":
            found = [p for p in found if p.state == state]
        if head is not None:
            head_owner, _, branch = head.partition(":")
            if head_owner != owner:
                found = []
            found = [p for p in found if p.head == branch]
        return web.json_response([p.as_json(self.api_url) for p in found])

    async def _create(self, request: web.Request) -> web.Response:
        owner, repo = request.match_info["owner"], request.match_info["repo"]
        body = await request.json()
        missing = [k for k in ("head", "base") if not body.get(k)]
        if missing or not body.get("title"):
            return web.json_response(
                {"message": "Validation Failed", "errors": [{"field": f} for f in missing]},
                status=422,
            )
        if self._open(owner, repo, body["head"], body["base"]):
            return web.json_response(
                {
                    "message": "Validation Failed",
                    "errors": [
                        {
                            "resource": "PullRequest",
                            "code": "custom",
                            "message": f"A pull request already exists for {owner}:{body['head']}.",
                        }
                    ],
                    "documentation_url": "https://docs.github.com/rest/pulls/pulls#create-a-pull-request",
                },
                status=422,
            )
        pr = PullRequest(
            owner, repo, next(self._numbers), body["title"], body.get("body") or "",
            body["head"], body["base"],
        )  # fmt: skip
        self.pulls.append(pr)
        return web.json_response(pr.as_json(self.api_url), status=201)


__all__ = ["FakeGitHub", "PullRequest", "Recorded"]
