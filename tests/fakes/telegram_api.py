"""A fake Telegram Bot API and webhook sender, over real HTTP.

Bot API (what python-telegram-bot's ``Bot(token, base_url=fake.base_url)`` calls):
``/bot<token>/getMe`` and ``/bot<token>/sendMessage``; a wrong token is a 404 like Telegram
(``{"ok": false, "error_code": 404}``). `rate_limit(n, retry_after)` makes the next `n`
sendMessage calls answer 429 with ``parameters.retry_after``. Sent messages are in `sent`.

Webhook side: `post_update` POSTs an Update with the ``X-Telegram-Bot-Api-Secret-Token``
header, as Telegram does for a webhook set with a secret_token.
"""

from __future__ import annotations

import itertools
import json
import time
from dataclasses import dataclass
from typing import Any

import aiohttp
from aiohttp import web

from tests.fakes.http import LocalHttpServer, ServedFake

SECRET_HEADER = "X-Telegram-Bot-Api-Secret-Token"


@dataclass
class TelegramMessage:
    chat_id: str
    text: str
    reply_to: int | None
    message_id: int


class FakeTelegram(ServedFake):
    def __init__(self, token: str = "123:ABC", bot_id: int = 123) -> None:
        self._http = LocalHttpServer()
        self.token = token
        self.bot_id = bot_id
        self.sent: list[TelegramMessage] = []
        self.rate_limited_calls = 0
        self._limit_left = 0
        self._retry_after = 1
        self._ids = itertools.count(1000)

    @property
    def base_url(self) -> str:
        """Telegram's ``https://api.telegram.org/bot`` here (the token is appended)."""
        return f"{self._http.url}/bot"

    def rate_limit(self, calls: int, retry_after: int = 1) -> None:
        self._limit_left = calls
        self._retry_after = retry_after

    def _app(self) -> web.Application:
        app = web.Application()
        app.router.add_route("*", "/bot{token}/{method}", self._call)
        return app

    @staticmethod
    async def _params(request: web.Request) -> dict[str, Any]:
        if request.content_type == "application/json":
            body = await request.json()
            return dict(body) if isinstance(body, dict) else {}
        return {k: v for k, v in (await request.post()).items() if isinstance(v, str)}

    async def _call(self, request: web.Request) -> web.Response:
        if request.match_info["token"] != self.token:
            return web.json_response(
                {"ok": False, "error_code": 404, "description": "Not Found"}, status=404
            )
        method = request.match_info["method"]
        if method == "getMe":
            return web.json_response(
                {
                    "ok": True,
                    "result": {
                        "id": self.bot_id,
                        "is_bot": True,
                        "first_name": "nexus",
                        "username": "nexus_bot",
                    },
                }
            )
        if method == "sendMessage":
            return self._send(await self._params(request))
        return web.json_response(
            {"ok": False, "error_code": 404, "description": "Not Found: method not found"},
            status=404,
        )

    def _send(self, params: dict[str, Any]) -> web.Response:
        if self._limit_left > 0:
            self._limit_left -= 1
            self.rate_limited_calls += 1
            return web.json_response(
                {
                    "ok": False,
                    "error_code": 429,
                    "description": f"Too Many Requests: retry after {self._retry_after}",
                    "parameters": {"retry_after": self._retry_after},
                },
                status=429,
            )
        chat_id, text = params.get("chat_id"), params.get("text")
        if chat_id is None or not text:
            return web.json_response(
                {
                    "ok": False,
                    "error_code": 400,
                    "description": "Bad Request: message text is empty",
                },
                status=400,
            )
        reply = params.get("reply_to_message_id")
        if reply is None and params.get("reply_parameters"):
            rp = params["reply_parameters"]
            rp = json.loads(rp) if isinstance(rp, str) else rp
            reply = rp.get("message_id")
        message_id = next(self._ids)
        self.sent.append(
            TelegramMessage(str(chat_id), str(text), int(reply) if reply else None, message_id)
        )
        result = {
            "message_id": message_id,
            "date": int(time.time()),
            "chat": {"id": int(chat_id), "type": "private"},
            "text": text,
        }
        return web.json_response({"ok": True, "result": result})

    def replies_to(self, chat_id: str, message_id: int) -> list[str]:
        return [m.text for m in self.sent if m.chat_id == chat_id and m.reply_to == message_id]


def update(
    text: str,
    *,
    update_id: int = 1,
    chat_id: int = 42,
    user_id: int = 7,
    message_id: int = 10,
    reply_to: int | None = None,
) -> dict[str, Any]:
    """A Bot API ``Update`` carrying one private text message."""
    message: dict[str, Any] = {
        "message_id": message_id,
        "date": int(time.time()),
        "chat": {"id": chat_id, "type": "private"},
        "from": {"id": user_id, "is_bot": False, "first_name": "Ada"},
        "text": text,
    }
    if reply_to is not None:
        message["reply_to_message"] = {
            "message_id": reply_to,
            "date": int(time.time()),
            "chat": {"id": chat_id, "type": "private"},
            "text": "(earlier)",
        }
    return {"update_id": update_id, "message": message}


async def post_update(
    url: str, payload: dict[str, Any] | bytes, secret: str | None
) -> tuple[int, str]:
    """POST an Update as Telegram's webhook delivery does; returns (status, body text)."""
    body = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
    headers = {"Content-Type": "application/json"}
    if secret is not None:
        headers[SECRET_HEADER] = secret
    async with (
        aiohttp.ClientSession() as session,
        session.post(url, data=body, headers=headers) as resp,
    ):
        return resp.status, await resp.text()
