"""Slack Events API ingress: signature (v0, slack-sdk's SignatureVerifier), replay window,
url_verification, app mentions and direct messages.

Dedupe: the primary key is the message itself (team, channel, ts): Slack can send one
message twice under different event ids (``message.im`` and ``app_mention``, or a retry);
the event id is the second key. ``X-Slack-Retry-Num`` marks a retry, answered 200 at once.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from typing import Any

from nexus_events.contract import subjects
from nexus_events.contract.subjects import Direction
from nexus_events.events import ChannelMessageIn
from slack_sdk.signature import Clock, SignatureVerifier

from nexus_channel_gateway.inbound import Accepted, Refused, Reply, Verdict, key_token

CHANNEL = "slack"
# Slack's advice and slack-sdk's fixed check: a signed request older than 5 minutes is a replay.
TIMESTAMP_WINDOW = 300


class _Clock(Clock):
    def __init__(self, now: Callable[[], float]) -> None:
        self._now = now

    def now(self) -> float:
        return self._now()


class SlackIngress:
    def __init__(
        self,
        signing_secret: str,
        *,
        bot_user: str | None = None,
        now: Callable[[], float] = time.time,
    ) -> None:
        self.verifier = SignatureVerifier(signing_secret, clock=_Clock(now))
        self.bot_user = bot_user
        self._now = now

    def _verify(self, body: bytes, headers: Mapping[str, str]) -> Refused | None:
        ts = headers.get("X-Slack-Request-Timestamp")
        signature = headers.get("X-Slack-Signature")
        if not ts or not signature:
            return Refused(401, "missing Slack signature headers", "forged")
        try:
            stamp = int(ts)
        except ValueError:
            return Refused(400, "X-Slack-Request-Timestamp is not a number", "malformed")
        if abs(self._now() - stamp) > TIMESTAMP_WINDOW:
            return Refused(401, "request timestamp outside the 300 s window", "stale")
        if not self.verifier.is_valid(body=body, timestamp=ts, signature=signature):
            return Refused(401, "invalid Slack signature", "forged")
        return None

    def handle(self, body: bytes, headers: Mapping[str, str]) -> Verdict:
        refused = self._verify(body, headers)
        if refused is not None:
            return refused
        try:
            payload = json.loads(body)
        except (UnicodeDecodeError, json.JSONDecodeError):
            return Refused(400, "body is not JSON", "malformed")
        if not isinstance(payload, dict):
            return Refused(400, "body is not a JSON object", "malformed")
        kind = payload.get("type")
        if kind == "url_verification":
            return Reply(200, {"challenge": str(payload.get("challenge", ""))}, "verification")
        if kind != "event_callback" or not isinstance(payload.get("event"), dict):
            return Reply(200, {}, "ignored")
        return self._message(payload, retry=headers.get("X-Slack-Retry-Num") is not None)

    def _message(self, payload: dict[str, Any], *, retry: bool) -> Verdict:
        event = payload["event"]
        kind = event.get("type")
        direct = kind == "message" and event.get("channel_type") == "im"
        if kind != "app_mention" and not direct:
            return Reply(200, {}, "ignored")
        # Edits, joins, and the bot's own posts come as subtypes or carry bot_id.
        if event.get("subtype") or event.get("bot_id") or event.get("user") == self.bot_user:
            return Reply(200, {}, "ignored")
        user, channel, ts, text = (event.get(k) for k in ("user", "channel", "ts", "text"))
        if not all(isinstance(v, str) and v for v in (user, channel, ts)) or not isinstance(
            text, str
        ):
            return Refused(400, "event lacks user, channel, ts or text", "malformed")
        team = str(payload.get("team_id") or event.get("team") or "T")
        key = key_token("slack", team, channel, ts)
        aliases = (
            (key_token("slack-ev", str(payload["event_id"])),) if payload.get("event_id") else ()
        )
        thread = event.get("thread_ts")
        message = ChannelMessageIn(
            conversation=channel,
            text=text,
            user=user,
            message_id=ts,
            thread=thread if isinstance(thread, str) and thread != ts else None,
            direct=direct,
            dedupe_key=key,
        )
        return Accepted(
            CHANNEL, key, subjects.channel_message(CHANNEL, Direction.IN), message, aliases, retry
        )
