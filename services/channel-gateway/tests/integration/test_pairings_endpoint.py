"""`nexus pair` reads the gateway's tables through ``nexus.channels.v1.pairings``: pairings
older than what NEXUS_CHANNELS holds are still listed, approved and revoked; with no gateway
the CLI says so and folds what the stream still holds."""

from __future__ import annotations

import json
from pathlib import Path

from nexus_events.contract import subjects
from nexus_events.contract.streams import CHANNELS
from nexus_events.transport.bus import Bus
from nexus_testing import eventually
from tests.fakes.telegram_api import FakeTelegram, post_update, update
from tests.support.cli import nexus
from tests.support.gateway import TG_SECRET, pair
from typer.testing import Result

from nexus_channel_gateway.app import GatewayApp


def listed(result: Result) -> list[tuple[str, str, str, str | None]]:
    assert result.exit_code == 0, result.output
    return [
        (p["channel"], p["user"], p["status"], p["name"])
        for p in json.loads(result.stdout)["pairings"]
    ]


async def _not(check: object) -> bool:
    return not await check  # type: ignore[misc]


async def test_pairings_outlive_the_stream_and_the_cli_falls_back_when_the_gateway_is_away(
    bus: Bus, gateway: GatewayApp, telegram: FakeTelegram, nats_url: str, tmp_path: Path
) -> None:
    store = gateway.store
    assert store is not None
    await pair(bus, "slack", "U1")
    await eventually(lambda: store.allowed("slack", "U1"), what="pairing applied")
    url = f"http://127.0.0.1:{gateway.port}/telegram/webhook"
    assert (await post_update(url, update("hi", update_id=1), TG_SECRET))[0] == 200
    challenge = await eventually(lambda: telegram.replies_to("42", 10), what="challenge")
    # Everything the stream said about pairing ages out (max_age), the tables keep it.
    await bus.js.purge_stream(CHANNELS)

    first = await nexus(nats_url, tmp_path, "pair", "ls", "-o", "json")
    # The gateway answered (a fallback to the purged stream would list nothing, and say why).
    assert "note:" not in first.stderr, first.stderr
    assert listed(first) == [("slack", "U1", "approved", None), ("telegram", "7", "pending", "Ada")]
    code = json.loads(first.stdout)["pairings"][1]["code"]
    assert code in challenge[0]
    # Approve and revoke work from the gateway's book alone.
    approved = await nexus(nats_url, tmp_path, "pair", "approve", code)
    assert approved.exit_code == 0, approved.output
    await eventually(lambda: store.allowed("telegram", "7"), what="approved")
    revoked = await nexus(nats_url, tmp_path, "pair", "revoke", "slack:U1")
    assert revoked.exit_code == 0, revoked.output
    await eventually(lambda: _not(store.allowed("slack", "U1")), what="revoked")
    after = await nexus(nats_url, tmp_path, "pair", "ls", "-o", "json")
    assert listed(after) == [("telegram", "7", "approved", "Ada")]

    # A malformed request is a 400 naming the field, not a timeout.
    reply = await bus.nc.request(subjects.CHANNEL_PAIRINGS, b'{"everything": true}', timeout=5)
    assert (reply.headers or {}).get("Nats-Service-Error-Code") == "400"
    assert "everything" in json.loads(reply.data)["error"]["message"]

    # No gateway: the stream's events since the purge, and a note on stderr saying so.
    await gateway.stop()
    fallback = await nexus(nats_url, tmp_path, "--timeout", "2", "pair", "ls", "-o", "json")
    assert "note:" in fallback.stderr
    assert "NEXUS_CHANNELS" in fallback.stderr
    assert listed(fallback) == [("telegram", "7", "approved", None)]
    everything = await nexus(nats_url, tmp_path, "pair", "ls", "--all", "-o", "json")
    assert listed(everything) == [
        ("telegram", "7", "approved", None),
        ("slack", "U1", "revoked", None),
    ]
