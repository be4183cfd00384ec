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


def _slack_error(exc: SlackApiError) -> str:
    """Slack's error code (``channel_not_found``) or, for a non-JSON answer, the status."""
    data = exc.response.data
    if isinstance(data, dict) and data.get("error"):
        return str(data["error"])
    return f"HTTP {exc.response.status_code}"


def _retry_after(exc: SlackApiError) -> float:
    with contextlib.suppress(TypeError, ValueError):
        return float(exc.response.headers.get("Retry-After", 1))
    return 1.0


class Poster(Protocol):
    can_find: bool  # whether `find` can tell if a post went out

    async def post(self, conversation: str, thread: str | None, text: str, key: str) -> str:
        """Post `text` (tagged with the idempotency `key` where the platform keeps tags);
        return the platform's message id."""
        ...

    async def find(self, conversation: str, thread: str | None, key: str) -> str | None:
        """The id of a message posted earlier with `key`; None if there is none. Only asked
        of a platform whose `can_find` is true."""
        ...

    async def close(self) -> None: ...


# Slack message metadata event type carrying the idempotency key of a reply.
METADATA_EVENT = "nexus_reply"
# How far back a lookup reads the channel's top level (replies outside a thread).
HISTORY_LIMIT = 100


class SlackPoster:
    can_find = True

    def __init__(self, token: str, base_url: str) -> None:
        self.client = AsyncWebClient(token=token, base_url=base_url)

    async def identity(self) -> str:
        """The bot's own user id (``auth.test``): its messages are not commands."""
        answer = await self.client.auth_test()
        return str(answer["user_id"])

    async def post(self, conversation: str, thread: str | None, text: str, key: str) -> str:
        try:
            answer = await self.client.chat_postMessage(
                channel=conversation,
                text=text,
                thread_ts=thread,
                metadata={"event_type": METADATA_EVENT, "event_payload": {"key": key}},
            )
        except SlackApiError as exc:
            if exc.response.status_code == 429:
                raise RateLimited(_retry_after(exc)) from exc
            raise Rejected(_slack_error(exc)) from exc
        return str(answer["ts"])

    async def find(self, conversation: str, thread: str | None, key: str) -> str | None:
        """Look for our message by its metadata: in the thread, else the channel's latest."""
        try:
            if thread is not None:
                answer = await self.client.conversations_replies(
                    channel=conversation, ts=thread, include_all_metadata=True
                )
            else:
                answer = await self.client.conversations_history(
                    channel=conversation, include_all_metadata=True, limit=HISTORY_LIMIT
                )
        except SlackApiError as exc:
            if exc.response.status_code == 429:
                raise RateLimited(_retry_after(exc)) from exc
            raise Rejected(_slack_error(exc)) from exc
        for message in answer.get("messages") or []:
            metadata = message.get("metadata") or {}
            payload = metadata.get("event_payload") or {}
            if metadata.get("event_type") == METADATA_EVENT and payload.get("key") == key:
                return str(message.get("ts"))
        return None

    async def close(self) -> None:
        return None


class TelegramPoster:
    can_find = False

    def __init__(self, token: str, base_url: str) -> None:
        self.bot = Bot(token, base_url=base_url)
        self._ready = False

    async def identity(self) -> str:
        if not self._ready:
            await self.bot.initialize()  # getMe: fails fast on a wrong token
            self._ready = True
        return str(self.bot.id)

    async def post(self, conversation: str, thread: str | None, text: str, key: str) -> str:
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

    async def find(self, conversation: str, thread: str | None, key: str) -> str | None:
        # The Bot API cannot read a chat's history (can_find is False): nothing to look up.
        return None

    async def close(self) -> None:
        if self._ready:
            await self.bot.shutdown()
            self._ready = False
