"""The fake Slack against slack-sdk (its AsyncWebClient, SlackApiError and SignatureVerifier)
and Slack's published Events API and Web API reference: the envelope and inner-event fields
Slack always sends, message shapes from chat.postMessage and conversations.*, the answers to a
missing or wrong token and to a rate limit."""

from __future__ import annotations

import json
import time

import aiohttp
import pytest
from slack_sdk.errors import SlackApiError
from slack_sdk.signature import SignatureVerifier
from slack_sdk.web.async_client import AsyncWebClient

from tests.fakes.slack_api import FakeSlack, event_callback, signed_headers, url_verification
from tests.fakes_contract.shapes import missing

# The Events API envelope (Slack's event reference; @slack/types' EnvelopedEvent).
ENVELOPE = ("token", "team_id", "api_app_id", "event", "type", "event_id", "event_time",
            "authorizations")  # fmt: skip
AUTHORIZATION = ("team_id", "user_id", "is_bot", "is_enterprise_install")
# app_mention (AppMentionEvent) and message.im (GenericMessageEvent): what is always there.
APP_MENTION = ("type", "user", "text", "ts", "channel", "event_ts")
MESSAGE_IM = ("type", "user", "text", "ts", "channel", "event_ts", "channel_type")
# A bot's message as chat.postMessage returns it and conversations.* list it.
BOT_MESSAGE = ("type", "user", "text", "ts", "bot_id", "team")


def test_event_callback_envelope_has_every_documented_field() -> None:
    mention = event_callback("<@UBOT> hi", thread_ts="1700000000.000100")
    assert missing(mention, ENVELOPE) == []
    assert mention["type"] == "event_callback"
    assert missing(mention["authorizations"][0], AUTHORIZATION, "authorizations.") == []
    assert missing(mention["event"], APP_MENTION, "event.") == []
    assert mention["event"]["thread_ts"] == "1700000000.000100"
    dm = event_callback("hi", kind="message")
    assert missing(dm["event"], MESSAGE_IM, "event.") == []
    # A direct message's conversation is a D… id, a channel's a C… one.
    assert (dm["event"]["channel"][0], mention["event"]["channel"][0]) == ("D", "C")
    assert dm["event"]["channel_type"] == "im"


def test_url_verification_is_slacks_handshake() -> None:
    assert url_verification("abc") == {
        "token": "t0k3n",
        "challenge": "abc",
        "type": "url_verification",
    }


def test_signed_headers_pass_slack_sdks_verifier() -> None:
    body = json.dumps(event_callback("hi")).encode()
    headers = signed_headers("s3cret", body)
    verifier = SignatureVerifier("s3cret")
    assert verifier.is_valid_request(body, headers)
    assert not SignatureVerifier("other").is_valid_request(body, headers)
    assert abs(int(headers["X-Slack-Request-Timestamp"]) - time.time()) < 5


async def test_web_api_answers_are_what_slack_returns() -> None:
    async with FakeSlack() as slack:
        client = AsyncWebClient(token=slack.token, base_url=slack.api_url)
        auth = await client.auth_test()
        fields = ("ok", "url", "team", "user", "team_id", "user_id", "bot_id")
        assert missing(auth.data, fields) == []  # type: ignore[arg-type]
        top = await client.chat_postMessage(channel="C1", text="hello")
        assert missing(top.data, ("ok", "channel", "ts", "message")) == []  # type: ignore[arg-type]
        assert missing(top["message"], BOT_MESSAGE, "message.") == []
        reply = await client.chat_postMessage(
            channel="C1", text="in thread", thread_ts=top["ts"],
            metadata={"event_type": "nexus_reply", "event_payload": {"key": "k1"}},
        )  # fmt: skip
        assert reply["message"]["thread_ts"] == top["ts"]
        assert reply["message"]["metadata"] == {
            "event_type": "nexus_reply", "event_payload": {"key": "k1"}
        }  # fmt: skip
        thread = await client.conversations_replies(
            channel="C1", ts=top["ts"], include_all_metadata=True
        )
        parent, child = thread["messages"]
        assert parent["ts"] == top["ts"]
        assert parent["thread_ts"] == top["ts"]
        assert parent["reply_count"] == 1
        assert child["metadata"]["event_payload"] == {"key": "k1"}
        for i in range(3):
            await client.chat_postMessage(channel="C1", text=f"more {i}")
        history = await client.conversations_history(channel="C1", limit=2)
        assert [m["text"] for m in history["messages"]] == ["more 2", "more 1"]
        assert history["has_more"] is True
        assert "metadata" not in history["messages"][0]


async def test_auth_and_rate_limit_failures_are_slacks() -> None:
    async with FakeSlack() as slack:
        async with aiohttp.ClientSession() as session:
            async with session.post(f"{slack.api_url}auth.test") as resp:
                assert (resp.status, await resp.json()) == (
                    200,
                    {"ok": False, "error": "not_authed"},
                )
            headers = {"Authorization": "Bearer xoxb-wrong"}
            async with session.post(f"{slack.api_url}auth.test", headers=headers) as resp:
                assert (resp.status, await resp.json()) == (
                    200,
                    {"ok": False, "error": "invalid_auth"},
                )
        client = AsyncWebClient(token=slack.token, base_url=slack.api_url)
        with pytest.raises(SlackApiError) as nowhere:
            await client.chat_postMessage(channel="", text="x")
        assert nowhere.value.response["error"] == "channel_not_found"
        slack.rate_limit(1, retry_after=7)
        with pytest.raises(SlackApiError) as limited:
            await client.chat_postMessage(channel="C1", text="x")
        assert limited.value.response.status_code == 429
        assert limited.value.response.headers["Retry-After"] == "7"
        assert limited.value.response["error"] == "ratelimited"
