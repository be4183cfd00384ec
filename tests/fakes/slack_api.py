"""A fake Slack Web API and Events API sender, over real HTTP.

Web API (what slack-sdk's ``AsyncWebClient(base_url=fake.api_url)`` calls): ``auth.test``,
``chat.postMessage`` (with message ``metadata``), ``conversations.replies`` and
``conversations.history`` (metadata returned with ``include_all_metadata``), all needing
``Authorization: Bearer <token>`` (else ``invalid_auth`` like Slack). Posts are recorded in
`posts`. `rate_limit(n, retry_after)` makes the next `n` ``chat.postMessage`` calls answer
429 with ``Retry-After`` as Slack does.

Events API side: `signed_headers` / `post_event` sign a body the documented way
(``v0=`` hex HMAC-SHA256 of ``v0:{timestamp}:{body}`` with the signing secret) and POST it to a
gateway, optionally as a retry (``X-Slack-Retry-Num``).
"""

from __future__ import annotations

import hashlib
import hmac
import itertools
import json
import time
from dataclasses import dataclass, field
from typing import Any

import aiohttp
from aiohttp import web

from tests.fakes.http import LocalHttpServer, ServedFake


@dataclass
class SlackPost:
    channel: str
    text: str
    thread_ts: str | None
    ts: str
    raw: dict[str, Any] = field(default_factory=dict)


class FakeSlack(ServedFake):
    def __init__(self, token: str = "xoxb-test", team: str = "T1", bot_user: str = "UBOT") -> None:
        self._http = LocalHttpServer()
        self.token = token
        self.team = team
        self.bot_user = bot_user
        self.posts: list[SlackPost] = []
        self.rate_limited_calls = 0
        self._limit_left = 0
        self._retry_after = 1
        self._ts = itertools.count(1)

    @property
    def api_url(self) -> str:
        return f"{self._http.url}/api/"

    def rate_limit(self, calls: int, retry_after: int = 1) -> None:
        """The next `calls` chat.postMessage calls get 429 + Retry-After: `retry_after`."""
        self._limit_left = calls
        self._retry_after = retry_after

    def _app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/api/auth.test", self._auth_test)
        app.router.add_post("/api/chat.postMessage", self._post_message)
        # slack-sdk reads conversations with GET and query parameters.
        for verb in ("GET", "POST"):
            app.router.add_route(verb, "/api/conversations.replies", self._replies)
            app.router.add_route(verb, "/api/conversations.history", self._history)
        return app

    def _authorized(self, request: web.Request) -> bool:
        return request.headers.get("Authorization") == f"Bearer {self.token}"

    @staticmethod
    async def _params(request: web.Request) -> dict[str, Any]:
        if request.method == "GET":
            return dict(request.query)
        if request.content_type == "application/json":
            body = await request.json()
            return dict(body) if isinstance(body, dict) else {}
        return dict(await request.post())

    async def _auth_test(self, request: web.Request) -> web.Response:
        if not self._authorized(request):
            return web.json_response({"ok": False, "error": "invalid_auth"})
        return web.json_response(
            {"ok": True, "team_id": self.team, "user_id": self.bot_user, "user": "nexus"}
        )

    async def _post_message(self, request: web.Request) -> web.Response:
        if not self._authorized(request):
            return web.json_response({"ok": False, "error": "invalid_auth"})
        if self._limit_left > 0:
            self._limit_left -= 1
            self.rate_limited_calls += 1
            return web.json_response(
                {"ok": False, "error": "ratelimited"},
                status=429,
                headers={"Retry-After": str(self._retry_after)},
            )
        params = await self._params(request)
        channel, text = params.get("channel"), params.get("text")
        if not channel or not text:
            return web.json_response({"ok": False, "error": "no_text"})
        ts = f"{1700000000 + next(self._ts)}.000100"
        thread = params.get("thread_ts") or None
        self.posts.append(SlackPost(str(channel), str(text), thread, ts, params))
        return web.json_response(
            {"ok": True, "channel": channel, "ts": ts, "message": {"text": text, "ts": ts}}
        )

    def _message(self, post: SlackPost, with_metadata: bool) -> dict[str, Any]:
        body: dict[str, Any] = {
            "type": "message",
            "text": post.text,
            "ts": post.ts,
            "bot_id": "B1",
            "user": self.bot_user,
        }
        if post.thread_ts:
            body["thread_ts"] = post.thread_ts
        metadata = post.raw.get("metadata")
        if with_metadata and metadata:
            body["metadata"] = json.loads(metadata) if isinstance(metadata, str) else metadata
        return body

    async def _replies(self, request: web.Request) -> web.Response:
        if not self._authorized(request):
            return web.json_response({"ok": False, "error": "invalid_auth"})
        params = await self._params(request)
        channel, ts = params.get("channel"), params.get("ts")
        meta = str(params.get("include_all_metadata", "")).lower() in ("1", "true")
        found = [
            self._message(p, meta)
            for p in self.posts
            if p.channel == channel and (p.thread_ts == ts or p.ts == ts)
        ]
        return web.json_response({"ok": True, "messages": found, "has_more": False})

    async def _history(self, request: web.Request) -> web.Response:
        if not self._authorized(request):
            return web.json_response({"ok": False, "error": "invalid_auth"})
        params = await self._params(request)
        meta = str(params.get("include_all_metadata", "")).lower() in ("1", "true")
        found = [
            self._message(p, meta)
            for p in reversed(self.posts)
            if p.channel == params.get("channel") and not p.thread_ts
        ]
        return web.json_response({"ok": True, "messages": found, "has_more": False})

    def thread(self, channel: str, thread_ts: str) -> list[str]:
        """Texts posted in one thread, in order."""
        return [p.text for p in self.posts if p.channel == channel and p.thread_ts == thread_ts]


def signed_headers(secret: str, body: bytes, timestamp: int | None = None) -> dict[str, str]:
    """Slack's request signature headers for `body` (v0, HMAC-SHA256)."""
    ts = str(int(time.time()) if timestamp is None else timestamp)
    base = b"v0:" + ts.encode() + b":" + body
    sig = "v0=" + hmac.new(secret.encode(), base, hashlib.sha256).hexdigest()
    return {
        "X-Slack-Request-Timestamp": ts,
        "X-Slack-Signature": sig,
        "Content-Type": "application/json",
    }


def event_callback(
    text: str,
    *,
    user: str = "U1",
    channel: str = "C1",
    ts: str = "1700000001.000200",
    thread_ts: str | None = None,
    event_id: str = "Ev1",
    kind: str = "app_mention",
    team: str = "T1",
) -> dict[str, Any]:
    """An Events API ``event_callback`` envelope for an app mention or a DM (``message.im``)."""
    event: dict[str, Any] = {"type": kind, "user": user, "text": text, "ts": ts, "channel": channel}
    if kind == "message":
        event["channel_type"] = "im"
    if thread_ts is not None:
        event["thread_ts"] = thread_ts
    return {
        "type": "event_callback",
        "team_id": team,
        "event_id": event_id,
        "event_time": int(time.time()),
        "event": event,
    }


async def post_event(
    url: str,
    payload: dict[str, Any] | bytes,
    secret: str,
    *,
    timestamp: int | None = None,
    retry_num: int | None = None,
    signature: str | None = None,
) -> tuple[int, str]:
    """POST a signed Events API request; returns (status, body text)."""
    body = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
    headers = signed_headers(secret, body, timestamp)
    if signature is not None:
        headers["X-Slack-Signature"] = signature
    if retry_num is not None:
        headers["X-Slack-Retry-Num"] = str(retry_num)
        headers["X-Slack-Retry-Reason"] = "http_timeout"
    async with (
        aiohttp.ClientSession() as session,
        session.post(url, data=body, headers=headers) as resp,
    ):
        return resp.status, await resp.text()
