"""The HTTP ingress: one aiohttp app with a route per channel (``/slack/events``,
``/telegram/webhook``, ``/hooks/<source>``), a body-size limit, and the same steps for each:
verify, store the dedupe key, answer 2xx, publish after (outbox).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Protocol

from aiohttp import web

from nexus_channel_gateway.inbound import Accepted, Refused, Reply, Verdict
from nexus_channel_gateway.metrics import GatewayMetrics
from nexus_channel_gateway.outbox import InboundOutbox

log = logging.getLogger(__name__)


class Verifier(Protocol):
    def handle(self, body: bytes, headers: Mapping[str, str]) -> Verdict: ...


class Ingress:
    def __init__(
        self,
        outbox: InboundOutbox,
        metrics: GatewayMetrics,
        *,
        max_body: int,
        slack: Verifier | None = None,
        telegram: Verifier | None = None,
        hooks: Mapping[str, Verifier] | None = None,
    ) -> None:
        self.outbox = outbox
        self.metrics = metrics
        self.max_body = max_body
        self.slack = slack
        self.telegram = telegram
        self.hooks = dict(hooks or {})
        self._runner: web.AppRunner | None = None
        self.port = 0

    def app(self) -> web.Application:
        app = web.Application(client_max_size=self.max_body)
        if self.slack is not None:
            app.router.add_post("/slack/events", self._route("slack", self.slack))
        if self.telegram is not None:
            app.router.add_post("/telegram/webhook", self._route("telegram", self.telegram))
        app.router.add_post("/hooks/{source}", self._hook)
        return app

    def _route(
        self, channel: str, verifier: Verifier
    ) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
        async def handler(request: web.Request) -> web.StreamResponse:
            return await self.handle(channel, verifier, request)

        return handler

    async def _hook(self, request: web.Request) -> web.StreamResponse:
        source = request.match_info["source"]
        verifier = self.hooks.get(source)
        if verifier is None:
            self.metrics.inbound("unknown", "unknown_source")
            return web.json_response({"error": f"no webhook source {source!r}"}, status=404)
        return await self.handle(source, verifier, request)

    async def handle(
        self, channel: str, verifier: Verifier, request: web.Request
    ) -> web.StreamResponse:
        if request.content_length is not None and request.content_length > self.max_body:
            return self._oversized(channel, request)
        try:
            body = await request.read()
        except web.HTTPRequestEntityTooLarge:
            return self._oversized(channel, request)
        verdict = verifier.handle(body, request.headers)
        if isinstance(verdict, Refused):
            self.metrics.inbound(channel, verdict.outcome)
            log.info("refused %s request: %s", channel, verdict.reason)
            return web.json_response({"error": verdict.reason}, status=verdict.status)
        if isinstance(verdict, Reply):
            self.metrics.inbound(channel, verdict.outcome)
            return web.json_response(verdict.body, status=verdict.status)
        return await self._accept(channel, verdict)

    def _oversized(self, channel: str, request: web.Request) -> web.StreamResponse:
        # A warning, unlike other refusals (info): a sender whose bodies outgrow the limit
        # loses its events until someone raises NEXUS_GATEWAY_MAX_BODY, so it must be seen.
        size = request.content_length
        log.warning(
            "refused %s request from %s: body of %s bytes over the %d-byte limit"
            " (NEXUS_GATEWAY_MAX_BODY), answered 413",
            channel,
            request.remote or "unknown",
            size if size is not None else "unknown (chunked)",
            self.max_body,
        )
        self.metrics.inbound(channel, "oversized")
        return web.json_response({"error": f"body over {self.max_body} bytes"}, status=413)

    async def _accept(self, channel: str, verdict: Accepted) -> web.StreamResponse:
        fresh = await self.outbox.accept(verdict)
        outcome = "accepted" if fresh else "duplicate"
        self.metrics.inbound(channel, outcome)
        if verdict.retry:
            self.metrics.inbound(channel, "retry")
        return web.json_response({"ok": True, "duplicate": not fresh})

    async def start(self, host: str, port: int) -> None:
        self._runner = web.AppRunner(self.app(), handle_signals=False, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, host, port)
        await site.start()
        server = site._server
        assert server is not None
        self.port = server.sockets[0].getsockname()[1]  # type: ignore[attr-defined]

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
