"""Telegram through the fake Bot API, and pairing decided with the real `nexus pair` CLI:
an unknown sender is challenged, approved, can start runs, is revoked, is challenged again."""

from __future__ import annotations

import json
from pathlib import Path

from nexus_cli.errors import ExitCode
from nexus_events.events import RunRequested
from nexus_events.transport.bus import Bus
from nexus_testing import eventually
from tests.fakes.telegram_api import FakeTelegram, post_update, update
from tests.support.cli import nexus
from tests.support.gateway import TG_SECRET, channel_events, run_requests

from nexus_channel_gateway.app import GatewayApp


def url(app: GatewayApp) -> str:
    return f"http://127.0.0.1:{app.port}/telegram/webhook"


async def test_pairing_with_the_cli_then_a_run_from_telegram(
    bus: Bus, gateway: GatewayApp, telegram: FakeTelegram, nats_url: str, tmp_path: Path
) -> None:
    first = update("run implementer: fix login", update_id=1, message_id=10)
    assert (await post_update(url(gateway), first, TG_SECRET))[0] == 200
    challenge = await eventually(lambda: telegram.replies_to("42", 10), what="challenge")
    assert "nexus pair approve" in challenge[0]
    assert await run_requests(bus) == []

    listed = await nexus(nats_url, tmp_path, "pair", "ls", "-o", "json")
    assert listed.exit_code == 0, listed.output
    pending = json.loads(listed.stdout)["pairings"]
    assert [(p["channel"], p["user"], p["status"]) for p in pending] == [
        ("telegram", "7", "pending")
    ]
    code = pending[0]["code"]
    assert code in challenge[0]
    wrong = await nexus(nats_url, tmp_path, "pair", "approve", "ZZZZZZ")
    assert wrong.exit_code == ExitCode.NOT_FOUND
    approved = await nexus(nats_url, tmp_path, "pair", "approve", code.lower())
    assert approved.exit_code == 0, approved.output
    await eventually(lambda: gateway.store.allowed("telegram", "7"), what="allowlist")  # type: ignore[union-attr]

    again = update("run implementer: fix login", update_id=2, message_id=11)
    assert (await post_update(url(gateway), again, TG_SECRET))[0] == 200
    requests = await eventually(lambda: run_requests(bus), what="run requested")
    request = requests[0].event
    assert isinstance(request, RunRequested)
    assert request.reply_to is not None
    assert (request.reply_to.conversation, request.reply_to.thread) == ("42", "11")
    await eventually(lambda: telegram.replies_to("42", 11), what="requested notice")

    revoked = await nexus(nats_url, tmp_path, "pair", "revoke", "telegram:7")
    assert revoked.exit_code == 0, revoked.output
    await eventually(
        lambda: _not(gateway.store.allowed("telegram", "7")),  # type: ignore[union-attr]
        what="revoked",
    )
    third = update("run implementer: more", update_id=3, message_id=12)
    await post_update(url(gateway), third, TG_SECRET)
    await eventually(lambda: telegram.replies_to("42", 12), what="challenged again")
    assert "nexus pair approve" in telegram.replies_to("42", 12)[0]
    assert len(await run_requests(bus)) == 1
    assert len(await channel_events(bus, "pairing_requested")) == 2
    again_revoke = await nexus(nats_url, tmp_path, "pair", "revoke", "telegram:7")
    assert again_revoke.exit_code == ExitCode.NOT_FOUND


async def _not(check: object) -> bool:
    return not await check  # type: ignore[misc]


async def test_wrong_secret_is_refused_and_update_ids_dedupe(
    bus: Bus, gateway: GatewayApp, telegram: FakeTelegram
) -> None:
    body = update("hello", update_id=5, message_id=20)
    assert (await post_update(url(gateway), body, "wrong"))[0] == 401
    assert (await post_update(url(gateway), body, None))[0] == 401
    assert (await post_update(url(gateway), b"[1,2]", TG_SECRET))[0] == 400
    for _ in range(3):
        assert (await post_update(url(gateway), body, TG_SECRET))[0] == 200
    await eventually(lambda: telegram.replies_to("42", 20), what="challenge")
    assert len(await channel_events(bus, "in")) == 1
    counts = gateway.metrics.counts
    assert counts["inbound", "telegram", "forged"] == 2
    assert counts["inbound", "telegram", "malformed"] == 1
    assert counts["inbound", "telegram", "duplicate"] == 2
