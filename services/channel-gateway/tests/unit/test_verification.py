"""Request verification without sockets: Slack's v0 signature and window, Telegram's secret
token, generic sources (schemes, window, config errors)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tests.fakes.slack_api import event_callback, signed_headers
from tests.fakes.telegram_api import update

from nexus_channel_gateway.inbound import Accepted, Refused, Reply
from nexus_channel_gateway.slack import SlackIngress
from nexus_channel_gateway.telegram import TelegramIngress
from nexus_channel_gateway.webhooks import WebhookIngress, WebhookSource, load_sources

NOW = 1_800_000_000


def slack(now: float = NOW) -> SlackIngress:
    return SlackIngress("s3cret", bot_user="UBOT", now=lambda: now)


def test_slack_accepts_a_signed_mention_and_keys_it_by_message() -> None:
    body = json.dumps(event_callback("<@UBOT> hi", ts="1.2", channel="C1", event_id="E1")).encode()
    verdict = slack().handle(body, signed_headers("s3cret", body, NOW))
    assert isinstance(verdict, Accepted)
    assert verdict.key == "slack-T1-C1-1.2"
    assert verdict.aliases == ("slack-ev-E1",)
    assert verdict.subject == "nexus.channel.v1.slack.in"


@pytest.mark.parametrize(
    ("age", "outcome"),
    [(299, None), (301, "stale"), (-301, "stale")],
    ids=["fresh", "old", "future"],
)
def test_slack_window_is_300_seconds(age: int, outcome: str | None) -> None:
    body = json.dumps(event_callback("<@UBOT> hi")).encode()
    verdict = slack().handle(body, signed_headers("s3cret", body, NOW - age))
    assert (verdict.outcome if isinstance(verdict, Refused) else None) == outcome


def test_slack_refuses_forged_and_ignores_its_own_posts() -> None:
    body = json.dumps(event_callback("<@UBOT> hi")).encode()
    forged = slack().handle(body, signed_headers("other", body, NOW))
    assert isinstance(forged, Refused)
    assert (forged.status, forged.outcome) == (401, "forged")
    tampered = slack().handle(body + b" ", signed_headers("s3cret", body, NOW))
    assert isinstance(tampered, Refused)
    own = json.dumps(event_callback("hello", user="UBOT")).encode()
    assert isinstance(slack().handle(own, signed_headers("s3cret", own, NOW)), Reply)


def test_telegram_secret_and_shape() -> None:
    ingress = TelegramIngress("tok", bot_id="9")
    body = json.dumps(update("hi", update_id=3, chat_id=5, message_id=8)).encode()
    ok = ingress.handle(body, {"X-Telegram-Bot-Api-Secret-Token": "tok"})
    assert isinstance(ok, Accepted)
    assert (ok.key, ok.aliases) == ("telegram-9-3", ("telegram-msg-9-5-8",))
    assert isinstance(ingress.handle(body, {"X-Telegram-Bot-Api-Secret-Token": "tok2"}), Refused)
    sticker = json.dumps({"update_id": 4, "message": {"message_id": 1, "sticker": {}}}).encode()
    assert isinstance(ingress.handle(sticker, {"X-Telegram-Bot-Api-Secret-Token": "tok"}), Reply)


def test_hmac_sha1_source_and_kind_from_a_json_path() -> None:
    import hashlib
    import hmac

    source = WebhookSource(
        name="old", scheme="hmac-sha1", secret="k", signature_header="X-Sig", kind_path="a.b"
    )
    ingress = WebhookIngress(source, env={})
    body = b'{"a": {"b": "built"}}'
    sig = hmac.new(b"k", body, hashlib.sha1).hexdigest()
    verdict = ingress.handle(body, {"X-Sig": sig})
    assert isinstance(verdict, Accepted)
    assert verdict.event.kind == "built"  # type: ignore[attr-defined]
    assert isinstance(ingress.handle(body, {"X-Sig": sig[:-1] + "0"}), Refused)


def test_source_config_errors_are_clear(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text("sources:\n  - name: a\n    scheme: hmac-sha256\n    secrett: x\n")
    with pytest.raises(ValueError, match="secrett"):
        load_sources(path)
    path.write_text("sources:\n  - name: slack\n    scheme: token\n    secret: x\n")
    with pytest.raises(ValueError, match="not slack or telegram"):
        load_sources(path)
    source = WebhookSource(name="a", scheme="token", secret_env="MISSING_ENV")
    with pytest.raises(ValueError, match="MISSING_ENV"):
        WebhookIngress(source, env={})
