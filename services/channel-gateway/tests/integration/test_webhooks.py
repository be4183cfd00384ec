"""Generic signed webhooks from a YAML file: HMAC-SHA256 with a timestamp window and
delivery-id dedupe, Standard Webhooks, a token source; published as `webhook` events."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import logging
import time
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
from nexus_events.events import WebhookReceived
from nexus_events.transport.bus import Bus
from nexus_testing import eventually
from tests.support.gateway import channel_events

from nexus_channel_gateway.app import GatewayApp

SOURCES = """
sources:
  - name: ci
    scheme: hmac-sha256
    secret_env: TEST_CI_SECRET
    signature_header: X-Hub-Signature-256
    signature_prefix: "sha256="
    timestamp_header: X-Timestamp
    delivery_header: X-Delivery
    kind_header: X-Event
  - name: billing
    scheme: standard-webhooks
    secret: "whsec_c2VjcmV0LWtleQ=="
    kind_path: data.type
  - name: simple
    scheme: token
    secret: tok-1
    signature_header: X-Token
"""


async def post(port: int, source: str, body: bytes, headers: dict[str, str]) -> int:
    async with (
        aiohttp.ClientSession() as session,
        session.post(f"http://127.0.0.1:{port}/hooks/{source}", data=body, headers=headers) as r,
    ):
        return r.status


def ci_headers(body: bytes, delivery: str, ts: int | None = None) -> dict[str, str]:
    mac = hmac.new(b"ci-secret", body, hashlib.sha256).hexdigest()
    return {
        "X-Hub-Signature-256": f"sha256={mac}",
        "X-Timestamp": str(int(time.time()) if ts is None else ts),
        "X-Delivery": delivery,
        "X-Event": "push",
    }


async def sources_gateway(
    make_gateway: object, tmp_path: Path, monkeypatch: object, **overrides: object
) -> GatewayApp:
    """A gateway serving the `SOURCES` file (the ci source's secret in its environment)."""
    monkeypatch.setenv("TEST_CI_SECRET", "ci-secret")  # type: ignore[attr-defined]
    path = tmp_path / "sources.yaml"
    path.write_text(SOURCES)
    gateway: GatewayApp = await make_gateway(  # type: ignore[operator]
        webhook_sources_file=path, **overrides
    )
    return gateway


async def test_generic_sources_verify_dedupe_and_publish(
    bus: Bus, make_gateway: object, tmp_path: Path, monkeypatch: object
) -> None:
    gateway = await sources_gateway(make_gateway, tmp_path, monkeypatch)
    port = gateway.port
    body = json.dumps({"ref": "main"}).encode()
    for _ in range(3):  # the sender retries one delivery
        assert await post(port, "ci", body, ci_headers(body, "d-1")) == 200
    forged = dict(ci_headers(body, "d-2"), **{"X-Hub-Signature-256": "sha256=00"})
    assert await post(port, "ci", body, forged) == 401
    assert await post(port, "ci", body, ci_headers(body, "d-3", ts=int(time.time()) - 900)) == 401
    assert await post(port, "nope", body, ci_headers(body, "d-4")) == 404

    sw_body = json.dumps({"data": {"type": "invoice.paid"}}).encode()
    ts = str(int(time.time()))
    signed = f"msg_1.{ts}.".encode() + sw_body
    sig = base64.b64encode(hmac.new(b"secret-key", signed, hashlib.sha256).digest()).decode()
    sw = {"webhook-id": "msg_1", "webhook-timestamp": ts, "webhook-signature": f"v1,{sig}"}
    assert await post(port, "billing", sw_body, sw) == 200
    assert await post(port, "billing", sw_body, dict(sw, **{"webhook-signature": "v1,AAAA"})) == 401
    assert await post(port, "simple", b"{}", {"X-Token": "tok-1"}) == 200
    assert await post(port, "simple", b"{}", {"X-Token": "tok-2"}) == 401

    published = await eventually(
        lambda: _at_least(channel_events(bus, "webhook"), 3), what="three webhooks"
    )
    events = [d.event for d in published]
    assert all(isinstance(e, WebhookReceived) for e in events)
    got = sorted((e.source, e.kind, e.delivery_id) for e in events)  # type: ignore[attr-defined]
    assert got[0] == ("billing", "invoice.paid", "msg_1")
    assert got[1] == ("ci", "push", "d-1")
    assert got[2][0] == "simple"
    assert events[0].payload is not None  # type: ignore[attr-defined]
    counts = gateway.metrics.counts
    assert counts["inbound", "ci", "accepted"] == 1
    assert counts["inbound", "ci", "duplicate"] == 2
    assert counts["inbound", "ci", "forged"] == 1
    assert counts["inbound", "ci", "stale"] == 1
    assert counts["inbound", "billing", "forged"] == 1


async def _at_least(coro: object, n: int) -> object:
    found = await coro  # type: ignore[misc]
    return found if len(found) >= n else None


async def test_an_oversized_body_is_413_with_one_warning_line(
    make_gateway: object, tmp_path: Path, monkeypatch: object, caplog: object
) -> None:
    gateway = await sources_gateway(make_gateway, tmp_path, monkeypatch, gateway_max_body=1000)
    big = b"x" * 5000

    async def chunked() -> AsyncIterator[bytes]:
        yield big  # no Content-Length: only reading the body finds it too large

    for body in (big, chunked()):
        async with (
            aiohttp.ClientSession() as session,
            session.post(f"http://127.0.0.1:{gateway.port}/hooks/ci", data=body) as resp,
        ):
            assert resp.status == 413
    lines = [
        r
        for r in caplog.records  # type: ignore[attr-defined]
        if r.name.startswith("nexus_channel_gateway") and r.levelno >= logging.WARNING
    ]
    assert len(lines) == 2, [r.getMessage() for r in lines]
    assert all(r.levelno == logging.WARNING and r.exc_info is None for r in lines)
    assert all("ci" in r.getMessage() and "1000" in r.getMessage() for r in lines)
    assert "5000" in lines[0].getMessage()  # the declared size, when there is one
    assert gateway.metrics.counts["inbound", "ci", "oversized"] == 2
