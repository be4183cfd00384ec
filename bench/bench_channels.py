"""Webhook ingress of the channel gateway: requests/s through signature verification (HMAC-
SHA256 with a timestamp), the PostgreSQL dedupe row and the 2xx, and the p99 from sending the
request to JetStream's ack of its event; next to a bare aiohttp handler (read the body, answer
JSON) served and loaded the same way, in the same run.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import json
import os
import tempfile
import time
import uuid
from pathlib import Path

import aiohttp
from aiohttp import web
from nexus_channel_gateway.app import GatewayApp
from nexus_channel_gateway.config import GatewaySettings
from nexus_channel_gateway.webhooks import delivery_key
from nexus_events.contract.streams import ensure_streams
from nexus_events.transport.bus import Bus, BusSettings

REQUESTS = 3000
CONCURRENCY = 32
SECRET = b"bench-secret"
SOURCES = """
sources:
  - name: bench
    scheme: hmac-sha256
    secret_env: BENCH_WEBHOOK_SECRET
    signature_header: X-Signature
    signature_prefix: "sha256="
    timestamp_header: X-Timestamp
    delivery_header: X-Delivery
    kind_header: X-Event
"""
BODY = json.dumps({"action": "opened", "number": 12, "title": "x" * 400}).encode()


def _headers(delivery: str) -> dict[str, str]:
    return {
        "X-Signature": "sha256=" + hmac.new(SECRET, BODY, hashlib.sha256).hexdigest(),
        "X-Timestamp": str(int(time.time())),
        "X-Delivery": delivery,
        "X-Event": "pull_request",
        "Content-Type": "application/json",
    }


async def _load(url: str, deliveries: list[str], sent: dict[str, float]) -> float:
    """POST one request per delivery id, CONCURRENCY at a time; returns requests/s."""
    queue: asyncio.Queue[str] = asyncio.Queue()
    for d in deliveries:
        queue.put_nowait(d)
    connector = aiohttp.TCPConnector(limit=CONCURRENCY)
    async with aiohttp.ClientSession(connector=connector) as session:

        async def worker() -> None:
            while not queue.empty():
                delivery = queue.get_nowait()
                headers = _headers(delivery)
                sent[delivery] = time.perf_counter()
                async with session.post(url, data=BODY, headers=headers) as resp:
                    await resp.read()
                    assert resp.status == 200, resp.status

        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(CONCURRENCY)))
        return len(deliveries) / (time.perf_counter() - started)


async def _bare() -> float:
    async def handler(request: web.Request) -> web.Response:
        await request.read()
        return web.json_response({"ok": True})

    app = web.Application()
    app.router.add_post("/hooks/bench", handler)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        url = f"http://127.0.0.1:{port}/hooks/bench"
        await _load(url, [f"w{i}" for i in range(200)], {})
        return await _load(url, [f"b{i}" for i in range(REQUESTS)], {})
    finally:
        await runner.cleanup()


async def _gateway(nats_url: str, dsn: str) -> tuple[float, float, float]:
    os.environ["BENCH_WEBHOOK_SECRET"] = SECRET.decode()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "sources.yaml"
        path.write_text(SOURCES)
        bus = await Bus.connect(BusSettings(url=nats_url), source="channel-gateway")
        await ensure_streams(bus.js)
        settings = GatewaySettings(
            database_url=dsn,
            gateway_port=0,
            health_port=None,
            webhook_sources_file=path,
            consumer_prefix=f"bench_{uuid.uuid4().hex[:6]}",
        )
        app = GatewayApp(settings, bus=bus)
        await app.start()
        acked: dict[str, float] = {}
        assert app.outbox is not None
        run = uuid.uuid4().hex[:8]
        deliveries = [f"{run}-{i}" for i in range(REQUESTS)]
        keys = {d: delivery_key("bench", d) for d in deliveries}
        wanted = set(keys.values())
        all_acked = asyncio.Event()

        def on_published(published: list[str]) -> None:
            now = time.perf_counter()
            for key in published:
                acked.setdefault(key, now)
            if wanted <= acked.keys():
                all_acked.set()

        app.outbox.on_published = on_published
        try:
            url = f"http://127.0.0.1:{app.port}/hooks/bench"
            await _load(url, [f"warm-{run}-{i}" for i in range(200)], {})
            sent: dict[str, float] = {}
            rate = await _load(url, deliveries, sent)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(all_acked.wait(), timeout=60)
            latencies = sorted(acked[keys[d]] - sent[d] for d in deliveries if keys[d] in acked)
            assert len(latencies) == len(deliveries), f"{len(latencies)} of {len(deliveries)} acked"
            p50 = latencies[len(latencies) // 2] * 1000
            p99 = latencies[int(len(latencies) * 0.99) - 1] * 1000
            return rate, p50, p99
        finally:
            await app.stop()
            await bus.close()


async def run(nats_url: str, dsn: str) -> list[tuple[str, float, str, float]]:
    bare = await _bare()
    rate, p50, p99 = await _gateway(nats_url, dsn)
    return [
        ("bare aiohttp handler, requests/s", bare, "", 0.0),
        ("gateway webhook ingress (HMAC + dedupe row), req/s", rate, "bare", rate / bare),
        ("request -> JetStream ack, p50 ms", p50, "", 0.0),
        ("request -> JetStream ack, p99 ms", p99, "", 0.0),
    ]
