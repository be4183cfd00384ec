"""The fake Telegram Bot API and its Update helper against python-telegram-bot's models
(``Update``/``Message``/``User``/``Chat`` ``de_json``) and its error mapping: everything the
fake sends parses with no unknown field (PTB keeps those in ``api_kwargs``), carries what the
Bot API reference says Telegram always sends, and fails the way Telegram fails."""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

import aiohttp
import pytest
from telegram import Bot, Message, ReplyParameters, TelegramObject, Update, User
from telegram.error import BadRequest, InvalidToken, RetryAfter

from tests.fakes.telegram_api import FakeTelegram, update

# getMe's User carries these (the Bot API: "Returned only in getMe").
GET_ME = ("can_join_groups", "can_read_all_group_messages", "supports_inline_queries",
          "can_connect_to_business", "has_main_web_app")  # fmt: skip


def unknown_fields(obj: TelegramObject, path: str = "") -> list[str]:
    """Keys PTB did not know, anywhere in `obj` (it keeps them in ``api_kwargs``)."""
    found = [f"{path}{key}" for key in obj.api_kwargs]
    for name, value in obj._get_attrs(recursive=False).items():
        values = value if isinstance(value, tuple | list) else (value,)
        for item in values:
            if isinstance(item, TelegramObject):
                found += unknown_fields(item, f"{path}{name}.")
    return found


def test_update_helper_is_an_update_telegram_would_send() -> None:
    data = update("hi", chat_id=42, user_id=7, message_id=10, reply_to=9)
    parsed = Update.de_json(data, None)
    assert unknown_fields(parsed) == []
    message = parsed.message
    assert message is not None
    assert message.from_user is not None
    assert (message.chat.id, message.from_user.id, message.text) == (42, 7, "hi")
    # A private chat is the other person: Telegram names it like the user.
    assert data["message"]["chat"]["first_name"] == data["message"]["from"]["first_name"]
    replied = message.reply_to_message
    assert replied is not None
    assert replied.message_id == 9
    assert replied.from_user is not None
    # Nothing lost or renamed on the way through PTB's model.
    back = parsed.to_dict()
    assert back["message"]["from"] == data["message"]["from"]
    assert back["message"]["chat"] == data["message"]["chat"]
    assert (
        back["message"]["reply_to_message"]["from"] == data["message"]["reply_to_message"]["from"]
    )


async def _raw(fake: FakeTelegram, method: str, token: str | None = None, **params: Any) -> Any:
    url = f"{fake.base_url}{token or fake.token}/{method}"
    async with aiohttp.ClientSession() as session, session.post(url, data=params) as resp:
        return resp.status, json.loads(await resp.read())


async def test_get_me_and_send_message_results_parse_with_every_field() -> None:
    async with FakeTelegram() as fake:
        status, me = await _raw(fake, "getMe")
        _, sent = await _raw(
            fake, "sendMessage", chat_id="42", text="hello",
            reply_parameters=json.dumps({"message_id": 10}),
        )  # fmt: skip
    assert status == 200
    assert me["ok"] is True
    user = User.de_json(me["result"], None)
    assert unknown_fields(user) == []
    assert user.is_bot
    assert [k for k in GET_ME if k not in me["result"]] == []
    assert sent["ok"] is True
    message = Message.de_json(sent["result"], None)
    assert unknown_fields(message) == []
    # Telegram's answer to sendMessage names the bot as the sender and the replied message.
    assert message.from_user is not None
    assert message.from_user.id == fake.bot_id
    assert message.reply_to_message is not None
    assert message.reply_to_message.message_id == 10
    assert message.chat.type == "private"
    assert message.chat.first_name


async def test_the_real_bot_talks_to_it_and_gets_telegrams_errors(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # PTB 22 warns on an int retry_after unless opted in to timedelta (its next major's type).
    monkeypatch.setenv("PTB_TIMEDELTA", "1")
    async with FakeTelegram(token="123:ABC") as fake:
        bot = Bot("123:ABC", base_url=fake.base_url)
        async with bot:
            sent = await bot.send_message(
                chat_id=42, text="hi", reply_parameters=ReplyParameters(5)
            )
            assert sent.reply_to_message is not None
            fake.rate_limit(1, retry_after=3)
            with pytest.raises(RetryAfter) as limited:
                await bot.send_message(chat_id=42, text="hi")
            assert limited.value.retry_after == dt.timedelta(seconds=3)
            with pytest.raises(BadRequest, match="Chat not found"):
                await bot.send_message(chat_id="@nobody", text="hi")
        # A well-formed token Telegram does not know: 401 Unauthorized (PTB: InvalidToken).
        status, body = await _raw(fake, "getMe", token="999:XYZ")
        assert (status, body) == (
            401,
            {"ok": False, "error_code": 401, "description": "Unauthorized"},
        )
        with pytest.raises(InvalidToken):  # initialize() calls getMe; the bot closes on error
            async with Bot("999:XYZ", base_url=fake.base_url):
                pass
        status, body = await _raw(fake, "nosuchMethod")
        assert (status, body["description"]) == (404, "Not Found")
