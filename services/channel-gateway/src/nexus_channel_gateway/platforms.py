"""Posting to chat platforms with their official clients: slack-sdk's AsyncWebClient
(``chat.postMessage``) and python-telegram-bot's Bot (``sendMessage``).

Errors are sorted for the sender: `RateLimited` (retry after the platform's delay, nothing was
posted), `Rejected` (the platform refused for good: bad channel, bad token), anything else is
transient (the network) and retried with backoff.
"""

from __future__ import annotations

import contextlib
from typing import Protocol

from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient
from telegram import Bot, ReplyParameters
from telegram.error import BadRequest, Forbidden, InvalidToken, RetryAfter


class RateLimited(Exception):  # noqa: N818 - a platform answer, not a bug
    def __init__(self, retry_after: float) -> None:
        super().__init__(f"rate limited, retry after {retry_after} s")
        self.retry_after = retry_after


class Rejected(Exception):  # noqa: N818 - a platform answer, not a bug
    pass


class Poster(Protocol):
    async def post(self, conversation: str, thread: str | None, text: str) -> str:
        """Post `text`; return the platform's message id."""
        ...

    async def close(self) -> None: ...


class SlackPoster:
    def __init__(self, token: str, base_url: str) -> None:
        self.client = AsyncWebClient(token=token, base_url=base_url)

    async def identity(self) -> str:
        """The bot's own user id (``auth.test``): its messages are not commands."""
        answer = await self.client.auth_test()
        return str(answer["user_id"])

    async def post(self, conversation: str, thread: str | None, text: str) -> str:
        try:
            answer = await self.client.chat_postMessage(
                channel=conversation, text=text, thread_ts=thread
            )
        except SlackApiError as exc:
            if exc.response.status_code == 429:
                delay = 1.0
                with contextlib.suppress(TypeError, ValueError):
                    delay = float(exc.response.headers.get("Retry-After", 1))
                raise RateLimited(delay) from exc
            raise Rejected(str(exc.response.get("error", exc))) from exc
        return str(answer["ts"])

    async def close(self) -> None:
        return None


class TelegramPoster:
    def __init__(self, token: str, base_url: str) -> None:
        self.bot = Bot(token, base_url=base_url)
        self._ready = False

    async def identity(self) -> str:
        if not self._ready:
            await self.bot.initialize()  # getMe: fails fast on a wrong token
            self._ready = True
        return str(self.bot.id)

    async def post(self, conversation: str, thread: str | None, text: str) -> str:
        await self.identity()
        reply = ReplyParameters(int(thread), allow_sending_without_reply=True) if thread else None
        try:
            message = await self.bot.send_message(
                chat_id=conversation, text=text, reply_parameters=reply
            )
        except RetryAfter as exc:
            delay = exc.retry_after
            raise RateLimited(
                float(delay.total_seconds() if hasattr(delay, "total_seconds") else delay)
            ) from exc
        except (BadRequest, Forbidden, InvalidToken) as exc:
            raise Rejected(str(exc)) from exc
        return str(message.message_id)

    async def close(self) -> None:
        if self._ready:
            await self.bot.shutdown()
            self._ready = False
