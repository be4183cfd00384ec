"""A fake Slack Web API and Events API sender, over real HTTP.

Web API (what slack-sdk's ``AsyncWebClient(base_url=fake.api_url)`` calls): ``auth.test``,
``chat.postMessage`` (with message ``metadata``), ``conversations.replies`` and
``conversations.history`` (metadata returned with ``include_all_metadata``; ``limit``, newest
first, ``has_more``), all needing ``Authorization: Bearer <token>``. Posts are recorded in
`posts`. `rate_limit(n, retry_after)` makes the next `n` ``chat.postMessage`` calls answer
429 with ``Retry-After`` as Slack does.

Events API side: `event_callback` and `url_verification` build what Slack POSTs;
`signed_headers` / `post_event` sign a body the documented way (``v0=`` hex HMAC-SHA256 of
``v0:{timestamp}:{body}`` with the signing secret) and POST it to a gateway, optionally as a
retry (``X-Slack-Retry-Num``).

Mirrors (docs/fakes.md): Slack's Events API reference (the envelope with ``token``,
``api_app_id``, ``authorizations``; an inner event's ``event_ts``; a DM's ``D…`` channel with
``channel_type: im``) and Web API reference (errors as HTTP 200 ``{"ok": false, "error"}``:
``not_authed`` without a token, ``invalid_auth`` with a wrong one, ``channel_not_found``,
``no_text``; a bot message with ``type``, ``user``, ``bot_id``, ``team``; a thread's parent
with ``thread_ts`` and ``reply_count``), checked with slack-sdk's client and SignatureVerifier
by tests/fakes_contract/test_slack.py.
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


# The app's ids in what the helpers build (Slack's are A…, B…; the verification token is
# deprecated but still sent).
APP_ID = "A0NEXUS"
BOT_ID = "B0NEXUS"
VERIFICATION_TOKEN = "t0k3n"  # a fixed test value, like Slack's example
# conversations.history's default page (Slack: 100).
HISTORY_LIMIT = 100


class FakeSlack(ServedFake):
    def __init__(self, token: str = "xoxb-test", team: str = "T1", bot_user: str = "UBOT") -> None:
        self._http = LocalHttpServer()
        self.token = token
        self.team = team
        self.bot_user = bot_user
        self.bot_id = BOT_ID
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

    def _auth_error(self, request: web.Request) -> web.Response | None:
        """Slack's answer to a call without a token or with a wrong one (HTTP 200)."""
        given = request.headers.get("Authorization")
        if not given:
            return web.json_response({"ok": False, "error": "not_authed"})
        if given != f"Bearer {self.token}":
            return web.json_response({"ok": False, "error": "invalid_auth"})
        return None

    @staticmethod
    async def _params(request: web.Request) -> dict[str, Any]:
        if request.method == "GET":
            return dict(request.query)
        if request.content_type == "application/json":
            body = await request.json()
            return dict(body) if isinstance(body, dict) else {}
        return dict(await request.post())

    async def _auth_test(self, request: web.Request) -> web.Response:
        if (refused := self._auth_error(request)) is not None:
            return refused
        return web.json_response({
            "ok": True, "url": "https://nexus-test.slack.com/", "team": "Nexus test",
            "user": "nexus", "team_id": self.team, "user_id": self.bot_user,
            "bot_id": self.bot_id, "is_enterprise_install": False,
        })  # fmt: skip

    async def _post_message(self, request: web.Request) -> web.Response:
        if (refused := self._auth_error(request)) is not None:
            return refused
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
        if not channel:
            return web.json_response({"ok": False, "error": "channel_not_found"})
        if not text:
            return web.json_response({"ok": False, "error": "no_text"})
        ts = f"{1700000000 + next(self._ts)}.000100"
        thread = params.get("thread_ts") or None
        post = SlackPost(str(channel), str(text), thread, ts, params)
        self.posts.append(post)
        # chat.postMessage answers with the message, its metadata included.
        message = self._message(post, with_metadata=True)
        return web.json_response({"ok": True, "channel": channel, "ts": ts, "message": message})

    def _message(self, post: SlackPost, with_metadata: bool) -> dict[str, Any]:
        body: dict[str, Any] = {
            "type": "message",
            "user": self.bot_user,
            "bot_id": self.bot_id,
            "app_id": APP_ID,
            "text": post.text,
            "ts": post.ts,
            "team": self.team,
        }
        replies = [p for p in self.posts if p.channel == post.channel and p.thread_ts == post.ts]
        if post.thread_ts:
            body["thread_ts"] = post.thread_ts
            body["parent_user_id"] = self.bot_user
        elif replies:  # a thread's parent
            body |= {"thread_ts": post.ts, "reply_count": len(replies),
                     "latest_reply": replies[-1].ts}  # fmt: skip
        metadata = post.raw.get("metadata")
        if with_metadata and metadata:
            body["metadata"] = json.loads(metadata) if isinstance(metadata, str) else metadata
        return body

    async def _replies(self, request: web.Request) -> web.Response:
        if (refused := self._auth_error(request)) is not None:
            return refused
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
        if (refused := self._auth_error(request)) is not None:
            return refused
        params = await self._params(request)
        meta = str(params.get("include_all_metadata", "")).lower() in ("1", "true")
        limit = int(params.get("limit") or HISTORY_LIMIT)
        found = [
            self._message(p, meta)
            for p in reversed(self.posts)
            if p.channel == params.get("channel") and not p.thread_ts
        ]
        return web.json_response(
            {"ok": True, "messages": found[:limit], "has_more": len(found) > limit}
        )

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
    channel: str | None = None,
    ts: str = "1700000001.000200",
    thread_ts: str | None = None,
    event_id: str = "Ev1",
    kind: str = "app_mention",
    team: str = "T1",
    bot_user: str = "UBOT",
) -> dict[str, Any]:
    """An Events API ``event_callback`` envelope for an app mention or a DM (``message.im``,
    in a ``D…`` conversation unless `channel` says otherwise)."""
    where = channel or ("D1" if kind == "message" else "C1")
    event: dict[str, Any] = {
        "type": kind, "user": user, "text": text, "ts": ts, "team": team,
        "channel": where, "event_ts": ts,
    }  # fmt: skip
    if kind == "message":
        event["channel_type"] = "im"
    if thread_ts is not None:
        event["thread_ts"] = thread_ts
    return {
        "token": VERIFICATION_TOKEN,
        "team_id": team,
        "api_app_id": APP_ID,
        "event": event,
        "type": "event_callback",
        "event_id": event_id,
        "event_time": int(time.time()),
        "authorizations": [
            {
                "enterprise_id": None,
                "team_id": team,
                "user_id": bot_user,
                "is_bot": True,
                "is_enterprise_install": False,
            },
        ],
        "is_ext_shared_channel": False,
        "event_context": f"4-{event_id}",
    }


def url_verification(challenge: str) -> dict[str, Any]:
    """The handshake Slack POSTs when an Events API request URL is set."""
    return {"token": VERIFICATION_TOKEN, "challenge": challenge, "type": "url_verification"}


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
