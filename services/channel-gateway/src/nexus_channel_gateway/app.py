"""Wiring and lifecycle of the channel gateway: start everything in order, stop it draining.

Start: the health endpoint, connect NATS, create missing streams (core owns their settings),
connect PostgreSQL and migrate ``channels``, log in to the configured platforms (a wrong
token fails the start), publish inbound left unpublished by a crash, start the durable
handlers (router, notifier, flow notifier, sender, delegation: FastStream subscribers of
`nexus_events.transport.fast`, on their own connection) and the pairings endpoint, then the HTTP
ingress. Stop (SIGTERM) unwinds that in reverse (`ServiceApp`): the ingress first (no new
requests), the handlers in flight finish (half the drain timeout), the outbox publishes what
it holds, connections close, the health endpoint goes last.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from nexus_events.contract.streams import CHANNELS, FLOWS, INBOX, RUNS
from nexus_events.runtime.clock import Clock, SystemClock
from nexus_events.runtime.metrics import MetricsSettings, setup_metrics
from nexus_events.runtime.periodic import PeriodicTask
from nexus_events.runtime.process import ServiceApp
from nexus_events.transport.bus import Bus, BusSettings
from nexus_events.transport.fast import Handlers
from opentelemetry.sdk.metrics import MeterProvider as SdkMeterProvider

from nexus_channel_gateway.config import GatewaySettings
from nexus_channel_gateway.conversations import Conversations
from nexus_channel_gateway.delegation import Delegator, delegation_spec
from nexus_channel_gateway.endpoints import GatewayEndpoints
from nexus_channel_gateway.flownotifier import FlowNotifier, flow_notifier_spec
from nexus_channel_gateway.ingress import Ingress, Verifier
from nexus_channel_gateway.metrics import GatewayMetrics
from nexus_channel_gateway.notifier import Notifier, notifier_spec
from nexus_channel_gateway.outbox import InboundOutbox
from nexus_channel_gateway.platforms import Poster, SlackPoster, TelegramPoster
from nexus_channel_gateway.router import Router, router_spec
from nexus_channel_gateway.sender import Sender, sender_spec
from nexus_channel_gateway.slack import SlackIngress
from nexus_channel_gateway.store import CHANNELS_SCHEMA, GatewayStore
from nexus_channel_gateway.telegram import TelegramIngress
from nexus_channel_gateway.webhooks import WebhookIngress, load_sources

log = logging.getLogger(__name__)

SOURCE = "channel-gateway"


class GatewayApp(ServiceApp):
    """The channel gateway. `bus` may be given (tests); otherwise connected at start."""

    def __init__(
        self,
        settings: GatewaySettings | None = None,
        *,
        bus_settings: BusSettings | None = None,
        bus: Bus | None = None,
        metrics_settings: MetricsSettings | None = None,
        schema: str = CHANNELS_SCHEMA,
        sweep_interval: float = 5.0,
        clock: Clock | None = None,
    ) -> None:
        self.settings = settings or GatewaySettings()
        self.bus_settings = bus_settings
        self.metrics_settings = metrics_settings
        self.schema = schema
        self.sweep_interval = sweep_interval
        self.clock: Clock = clock or SystemClock()
        self.conversations: Conversations | None = None
        super().__init__("channel gateway", bus=bus)
        self.meter_provider: SdkMeterProvider | None = None
        self.metrics = GatewayMetrics()
        self.store: GatewayStore | None = None
        self.outbox: InboundOutbox | None = None
        self.posters: dict[str, Poster] = {}
        # The router, notifier, delegation and sender durables: FastStream subscribers.
        self.handlers: Handlers | None = None
        self.ingress: Ingress | None = None
        self.endpoints: GatewayEndpoints | None = None

    @property
    def port(self) -> int:
        """The ingress port (useful with gateway_port 0)."""
        return 0 if self.ingress is None else self.ingress.port

    def ready(self) -> bool:
        """Connected, the handlers too, and JetStream electing no leader for a stream the
        gateway reads or writes (an inbound message could not be recorded meanwhile)."""
        return (
            self._running
            and self.nats_connected
            and self.jetstream is not None
            and self.jetstream.ok
            and (self.handlers is None or self.handlers.connected)
        )

    async def _verifiers(self) -> tuple[Verifier | None, Verifier | None, dict[str, Verifier]]:
        s = self.settings
        slack = telegram = None
        if s.slack_enabled:
            assert s.slack_bot_token is not None
            assert s.slack_signing_secret is not None
            poster = SlackPoster(s.slack_bot_token.get_secret_value(), s.slack_base_url)
            self.posters["slack"] = poster
            bot_user = await poster.identity()
            slack = SlackIngress(s.slack_signing_secret.get_secret_value(), bot_user=bot_user)
        if s.telegram_enabled:
            assert s.telegram_bot_token is not None
            assert s.telegram_secret_token is not None
            tg = TelegramPoster(s.telegram_bot_token.get_secret_value(), s.telegram_base_url)
            self.posters["telegram"] = tg
            bot_id = await tg.identity()
            telegram = TelegramIngress(s.telegram_secret_token.get_secret_value(), bot_id)
        hooks: dict[str, Verifier] = {}
        if s.webhook_sources_file is not None:
            sources = await asyncio.to_thread(load_sources, s.webhook_sources_file)
            hooks = {src.name: WebhookIngress(src) for src in sources}
        return slack, telegram, hooks

    async def open(self, stack: contextlib.AsyncExitStack) -> None:
        s = self.settings
        await self.open_runtime(
            stack, s, bus_settings=self.bus_settings, source=SOURCE,
            probe_streams=[CHANNELS, RUNS, FLOWS, INBOX], probe_interval=s.jetstream_probe_seconds,
            create_pool=s.create_pool,
        )  # fmt: skip
        pool = self.pool
        self.store = GatewayStore(pool, self.schema)
        await self.store.migrate()
        if self.metrics_settings is not None or MetricsSettings().prometheus_port is not None:
            self.meter_provider = setup_metrics(SOURCE, self.metrics_settings)
            stack.callback(self.meter_provider.shutdown)
            self.metrics = GatewayMetrics(self.meter_provider)
        stack.push_async_callback(self._close_posters)
        slack, telegram, hooks = await self._verifiers()
        self.outbox = InboundOutbox(self.bus, self.store, self.sweep_interval)
        recovered = await self.outbox.sweep()
        if recovered:
            log.info("published %d inbound messages left by the last run", recovered)
        await self.outbox.start()
        stack.push_async_callback(self.outbox.stop)
        prefix = s.consumer_prefix
        self.conversations = conversations = Conversations(
            self.bus, self.store, idle_seconds=s.conversation_idle_seconds, clock=self.clock
        )
        router = Router(
            self.bus,
            self.store,
            self.metrics,
            conversations,
            pairing_ttl=s.pairing_ttl,
            max_pending=s.pairing_max_pending,
            open_channels=frozenset(s.gateway_open_channels),
            approver_chats=frozenset((a.channel, a.conversation) for a in s.channel_approvers),
            default_approvers=s.approvers_default,
            teams=s.teams,
        )
        delegator = Delegator(self.bus, self.store, self.metrics, max_depth=s.delegation_max_depth)
        # Its own connection; in-flight handlers get half the drain timeout to finish.
        self.handlers = handlers = Handlers(self.bus, graceful_timeout=s.drain_timeout / 2)
        # Ordered where order is seen: the router judges each message against the allowlist
        # as of its stream position, the notifier turns a run's events into reply intents in
        # their order, the sender posts them in that order. Route requests are independent.
        handlers.durable(
            router_spec(f"{prefix}_router", s.fetch_timeout, s.ack_wait), ordered=True
        )(router.on_event)
        notifier = Notifier(
            self.bus, self.store, delegator, approvers=s.channel_approvers,
            conversations=conversations,
        )  # fmt: skip
        handlers.durable(
            notifier_spec(f"{prefix}_notifier", s.fetch_timeout, s.ack_wait), ordered=True
        )(notifier.on_event)
        flows = FlowNotifier(self.bus, self.store)
        handlers.durable(
            flow_notifier_spec(f"{prefix}_flows", s.fetch_timeout, s.ack_wait), ordered=True
        )(flows.on_event)
        handlers.durable(delegation_spec(f"{prefix}_delegation", s.fetch_timeout, s.ack_wait))(
            delegator.on_request
        )
        sender = Sender(self.bus, self.store, self.metrics, self.posters)
        handlers.durable(
            sender_spec(f"{prefix}_sender", s.fetch_timeout, s.ack_wait), ordered=True
        )(sender.on_intent)
        await handlers.start()
        stack.push_async_callback(handlers.stop)
        self.endpoints = GatewayEndpoints(self.bus, self.store)
        await self.endpoints.start()
        stack.push_async_callback(self.endpoints.stop)
        idle = PeriodicTask(
            conversations.sweep, s.conversation_sweep_seconds, name="idle conversations",
            first="after_interval", logger=log,
        )  # fmt: skip
        idle.start()
        stack.push_async_callback(idle.stop)
        # On a planned stop, while the sender still runs: each live conversation is told.
        stack.push_async_callback(self._tell_shutdown)
        self.ingress = Ingress(
            self.outbox,
            self.metrics,
            max_body=s.gateway_max_body,
            slack=slack,
            telegram=telegram,
            hooks=hooks,
        )
        stack.push_async_callback(self.ingress.stop)  # also undoes a start that failed
        await self.ingress.start(s.gateway_host, s.gateway_port)
        log.info(
            "channel gateway listening on %s:%d (slack %s, telegram %s, webhook sources %s)",
            s.gateway_host,
            self.port,
            slack is not None,
            telegram is not None,
            sorted(hooks) or "none",
        )

    async def _tell_shutdown(self) -> None:
        if self.conversations is None:
            return
        try:
            await self.conversations.tell_shutdown()
        except Exception:
            log.warning("could not tell live conversations of the shutdown", exc_info=True)

    async def _close_posters(self) -> None:
        for poster in self.posters.values():
            with contextlib.suppress(Exception):
                await poster.close()
