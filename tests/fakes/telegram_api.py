"""A fake Telegram Bot API and webhook sender, over real HTTP.

Bot API (what python-telegram-bot's ``Bot(token, base_url=fake.base_url)`` calls):
``/bot<token>/getMe`` and ``/bot<token>/sendMessage``. `rate_limit(n, retry_after)` makes the
next `n` sendMessage calls answer 429 with ``parameters.retry_after``. Sent messages are in
`sent`.

Webhook side: `update` builds an Update and `post_update` POSTs it with the
``X-Telegram-Bot-Api-Secret-Token`` header, as Telegram does for a webhook set with a
secret_token.

Mirrors (docs/fakes.md): the Bot API reference and python-telegram-bot's models and error
mapping. Answers are ``{"ok": true, "result": ...}`` or ``{"ok": false, "error_code",
"description"[, "parameters": {"retry_after"}]}`` with the same HTTP status: a well-formed
token Telegram does not know is 401 ``Unauthorized`` (PTB: InvalidToken), a malformed one or an
unknown method 404 ``Not Found``, a chat id that is no number 400 ``chat not found``. getMe's
User has the getMe-only fields; a sent Message has ``from`` (the bot), a private chat's
``first_name`` and, when replying, ``reply_to_message``. Checked against ``Update.de_json`` and
friends (no unknown field) by tests/fakes_contract/test_telegram.py.
"""

from __future__ import annotations

import itertools
import json
import re
import time
from dataclasses import dataclass
from typing import Any

import aiohttp
from aiohttp import web

from tests.fakes.http import LocalHttpServer, ServedFake

SECRET_HEADER = "X-Telegram-Bot-Api-Secret-Token"
# A token as BotFather issues it: Telegram answers 401 for an unknown one of this shape, 404
# for anything else (python-telegram-bot's BaseRequest explains both).
TOKEN_SHAPE = re.compile(r"\d+:[\w-]+")
# The first name Telegram gives a private chat: the person's (the helpers use one person).
PERSON = "Ada"


def _failure(code: int, description: str, **extra: Any) -> web.Response:
    body = {"ok": False, "error_code": code, "description": description, **extra}
    return web.json_response(body, status=code)


def private_chat(chat_id: int) -> dict[str, Any]:
    """A private chat as Telegram sends it: named after the person in it."""
    return {"id": chat_id, "first_name": PERSON, "type": "private"}


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

    def _bot_user(self) -> dict[str, Any]:
        return {"id": self.bot_id, "is_bot": True, "first_name": "nexus", "username": "nexus_bot"}

    async def _call(self, request: web.Request) -> web.Response:
        token = request.match_info["token"]
        if token != self.token:
            if TOKEN_SHAPE.fullmatch(token):
                return _failure(401, "Unauthorized")
            return _failure(404, "Not Found")
        method = request.match_info["method"]
        if method == "getMe":
            me = {
                **self._bot_user(),
                "can_join_groups": True,
                "can_read_all_group_messages": False,
                "supports_inline_queries": False,
                "can_connect_to_business": False,
                "has_main_web_app": False,
            }
            return web.json_response({"ok": True, "result": me})
        if method == "sendMessage":
            return self._send(await self._params(request))
        return _failure(404, "Not Found")

    def _send(self, params: dict[str, Any]) -> web.Response:
        if self._limit_left > 0:
            self._limit_left -= 1
            self.rate_limited_calls += 1
            return _failure(
                429,
                f"Too Many Requests: retry after {self._retry_after}",
                parameters={"retry_after": self._retry_after},
            )
        chat_id, text = params.get("chat_id"), params.get("text")
        if chat_id is None or chat_id == "":
            return _failure(400, "Bad Request: chat_id is empty")
        try:
            chat = int(chat_id)
        except ValueError:  # an @username of a chat this fake does not have
            return _failure(400, "Bad Request: chat not found")
        if not text:
            return _failure(400, "Bad Request: message text is empty")
        reply = params.get("reply_to_message_id")
        if reply is None and params.get("reply_parameters"):
            rp = params["reply_parameters"]
            rp = json.loads(rp) if isinstance(rp, str) else rp
            reply = rp.get("message_id")
        message_id = next(self._ids)
        self.sent.append(
            TelegramMessage(str(chat_id), str(text), int(reply) if reply else None, message_id)
        )
        now = int(time.time())
        result: dict[str, Any] = {
            "message_id": message_id,
            "from": self._bot_user(),
            "chat": private_chat(chat),
            "date": now,
            "text": text,
        }
        if reply:
            # Telegram includes the whole replied message; the fake knows only its id.
            result["reply_to_message"] = {
                "message_id": int(reply), "chat": private_chat(chat), "date": now,
            }  # fmt: skip
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
    person = {"id": user_id, "is_bot": False, "first_name": PERSON, "language_code": "en"}
    message: dict[str, Any] = {
        "message_id": message_id,
        "from": person,
        "chat": private_chat(chat_id),
        "date": int(time.time()),
        "text": text,
    }
    if reply_to is not None:
        message["reply_to_message"] = {
            "message_id": reply_to,
            "from": person,
            "chat": private_chat(chat_id),
            "date": int(time.time()),
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
