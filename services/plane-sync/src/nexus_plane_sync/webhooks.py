"""The webhook endpoint Plane calls: verify, dedupe, file on JetStream, answer.

``POST /webhooks/plane``: the signature (``X-Plane-Signature``, hex HMAC-SHA256 of the raw
body with the webhook's secret) is checked in constant time before anything else is read from
the body; the delivery id (``X-Plane-Delivery``) is recorded in PostgreSQL, so a repeated or
replayed delivery is answered 200 and filed once however old it is (Plane's payloads carry no
timestamp, so the persisted ids are the replay window); the payload is then published as
`PlaneWebhookReceived` with ``Nats-Msg-Id`` = the delivery id and answered 200 as soon as
JetStream has it. Acting on it is the ingress consumer's job, off the request path.
Bad requests get a 4xx and are counted: 401 bad signature, 400 missing headers or not JSON,
413 too large; 503 if NATS cannot take it (the delivery id is released, a resend can go).
The counts are saved to PostgreSQL (`PlaneStore.count_webhooks`) every `FLUSH_EVERY` seconds
and on stop, not per request: a flood of forged requests costs no database write each.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import time
from collections import Counter

import asyncpg
from aiohttp import web
from nexus_events.contract import subjects
from nexus_events.errors import BusError
from nexus_events.events import PlaneWebhookReceived
from nexus_events.runtime.periodic import PeriodicTask
from nexus_events.transport.bus import Bus

from nexus_plane_sync.metrics import PlaneSyncMetrics
from nexus_plane_sync.store import PlaneStore

log = logging.getLogger(__name__)

PATH = "/webhooks/plane"
WORKSPACE_KEY = "workspace"  # subject key of webhooks about no particular work item
FLUSH_EVERY = 5.0  # seconds between saves of the endpoint's counters


def signature(secret: bytes, body: bytes) -> str:
    return hmac.new(secret, body, hashlib.sha256).hexdigest()


def verify(secret: bytes, body: bytes, given: str | None) -> bool:
    """Constant-time check of Plane's signature of `body`."""
    if not given:
        return False
    return hmac.compare_digest(signature(secret, body), given.strip().lower())


def key_of(event: str, data: dict[str, object]) -> str:
    """The subject key of a webhook: the work item it concerns, when there is one."""
    candidate = data.get("issue") if event != "issue" else data.get("id")
    if isinstance(candidate, str) and subjects.TOKEN_PATTERN.fullmatch(candidate):
        return candidate
    return WORKSPACE_KEY


class WebhookServer:
    def __init__(
        self,
        bus: Bus,
        store: PlaneStore,
        secret: bytes,
        metrics: PlaneSyncMetrics,
        *,
        host: str,
        port: int,
        max_bytes: int,
    ) -> None:
        self.bus = bus
        self.store = store
        self.secret = secret
        self.metrics = metrics
        self.host = host
        self.port = port
        self.max_bytes = max_bytes
        self._runner: web.AppRunner | None = None
        self.unsaved: Counter[str] = Counter()  # counted, not yet in PostgreSQL
        # A save in hand is cut on stop; `stop` saves once more anyway.
        self._flushes = PeriodicTask(
            self.flush,
            FLUSH_EVERY,
            name="webhook counters save",
            first="after_interval",
            stop_grace=0,
            logger=log,
        )

    async def start(self) -> None:
        app = web.Application(client_max_size=self.max_bytes)
        app.router.add_post(PATH, self.handle)
        self._runner = web.AppRunner(app, handle_signals=False, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port)
        await site.start()
        server = site._server
        if server is not None and self.port == 0:
            self.port = server.sockets[0].getsockname()[1]  # type: ignore[attr-defined]
        self._flushes.start()

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        await self._flushes.stop()
        await self.flush()

    def _count(self, outcome: str) -> None:
        self.metrics.webhook(outcome)
        self.unsaved[outcome] += 1

    async def flush(self) -> None:
        """Save the counts not saved yet (kept for the next try if PostgreSQL is away)."""
        counts, self.unsaved = self.unsaved, Counter()
        try:
            await self.store.count_webhooks(dict(counts))
        except (OSError, asyncpg.PostgresError) as exc:
            self.unsaved.update(counts)
            log.warning("webhook counters not saved: %s", exc)

    async def _refuse(self, status: int, why: str, counter: str) -> web.Response:
        self._count(counter)
        log.warning("webhook refused (%d): %s", status, why)
        return web.json_response({"error": why}, status=status)

    async def handle(self, request: web.Request) -> web.Response:  # noqa: PLR0911 - one per answer
        try:
            body = await request.read()
        except web.HTTPRequestEntityTooLarge:
            return await self._refuse(413, "body too large", "too_large")
        if not verify(self.secret, body, request.headers.get("X-Plane-Signature")):
            return await self._refuse(401, "bad or missing X-Plane-Signature", "bad_signature")
        delivery = request.headers.get("X-Plane-Delivery", "")
        event = request.headers.get("X-Plane-Event", "")
        if not (0 < len(delivery) <= 128) or not (0 < len(event) <= 64):
            why = "missing X-Plane-Delivery or X-Plane-Event"
            return await self._refuse(400, why, "bad_request")
        try:
            payload = json.loads(body)
        except (json.JSONDecodeError, UnicodeDecodeError):
            return await self._refuse(400, "body is not JSON", "bad_request")
        if not isinstance(payload, dict):
            return await self._refuse(400, "body is not a JSON object", "bad_request")
        if not await self.store.first_delivery(delivery):
            self._count("duplicate")
            return web.json_response({"duplicate": True})
        data = payload.get("data") if isinstance(payload.get("data"), dict) else {}
        activity = payload.get("activity") if isinstance(payload.get("activity"), dict) else {}
        received = PlaneWebhookReceived(
            delivery_id=delivery,
            event=event,
            action=str(payload.get("action") or ""),
            webhook_id=_text(payload.get("webhook_id")),
            workspace_id=_text(payload.get("workspace_id")),
            data=data or {},
            activity=activity or {},
            received_at=time.time(),
        )
        try:
            await self.bus.publish(
                subjects.plane_event(key_of(event, data or {}), "webhook_received"),
                received,
                msg_id=f"plane:{delivery}",
            )
        except BusError as exc:
            await self.store.forget_delivery(delivery)
            return await self._refuse(503, f"cannot file the delivery: {exc}", "unavailable")
        self._count("accepted")
        return web.json_response({"ok": True})


def _text(value: object) -> str | None:
    return None if value is None else str(value)[:128]
