"""Telegram webhook ingress: the ``X-Telegram-Bot-Api-Secret-Token`` header compared in
constant time, text messages turned into `ChannelMessageIn`, ``update_id`` as the dedupe key
(chat and message id as the second: an edited resend carries a new update id)."""

from __future__ import annotations

import hmac
import json
from collections.abc import Mapping
from typing import Any

from nexus_events.contract import subjects
from nexus_events.contract.subjects import Direction
from nexus_events.events import ChannelMessageIn

from nexus_channel_gateway.inbound import Accepted, Refused, Reply, Verdict, key_token

CHANNEL = "telegram"
SECRET_HEADER = "X-Telegram-Bot-Api-Secret-Token"  # noqa: S105 - a header name


class TelegramIngress:
    def __init__(self, secret_token: str, bot_id: str = "bot") -> None:
        self._secret = secret_token.encode()
        self.bot_id = bot_id

    def handle(self, body: bytes, headers: Mapping[str, str]) -> Verdict:
        given = headers.get(SECRET_HEADER, "").encode()
        if not hmac.compare_digest(given, self._secret):
            return Refused(401, "wrong or missing secret token", "forged")
        try:
            update = json.loads(body)
        except (UnicodeDecodeError, json.JSONDecodeError):
            return Refused(400, "body is not JSON", "malformed")
        if not isinstance(update, dict) or not isinstance(update.get("update_id"), int):
            return Refused(400, "not a Telegram Update (no update_id)", "malformed")
        message = update.get("message")
        if not isinstance(message, dict) or not isinstance(message.get("text"), str):
            return Reply(200, {}, "ignored")  # stickers, edits, joins: nothing to do
        return self._message(update["update_id"], message)

    def _message(self, update_id: int, message: dict[str, Any]) -> Verdict:
        chat, sender = message.get("chat"), message.get("from")
        if not isinstance(chat, dict) or not isinstance(sender, dict) or "id" not in chat:
            return Refused(400, "message lacks chat or from", "malformed")
        if sender.get("is_bot"):
            return Reply(200, {}, "ignored")
        chat_id, message_id = str(chat["id"]), str(message.get("message_id", ""))
        replied = message.get("reply_to_message")
        thread = str(replied["message_id"]) if isinstance(replied, dict) else None
        key = key_token("telegram", self.bot_id, str(update_id))
        event = ChannelMessageIn(
            conversation=chat_id,
            text=message["text"],
            user=str(sender.get("id")),
            message_id=message_id,
            thread=thread,
            direct=chat.get("type") == "private",
            dedupe_key=key,
            user_name=sender.get("username") or sender.get("first_name"),
        )
        alias = key_token("telegram-msg", self.bot_id, chat_id, message_id)
        return Accepted(
            CHANNEL, key, subjects.channel_message(CHANNEL, Direction.IN), event, (alias,)
        )
