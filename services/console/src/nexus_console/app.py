"""Wiring and lifecycle of the console: health, NATS, the live feed, then the pages; stopped
in the reverse order (the pages first, so no page outlives what it reads)."""

from __future__ import annotations

import contextlib
import logging

from nexus_events.runtime.clock import Clock, SystemClock
from nexus_events.runtime.metrics import MetricsSettings, setup_metrics
from nexus_events.runtime.process import ServiceApp
from nexus_events.transport.bus import Bus, BusSettings

from nexus_console.auth.sessions import Signer
from nexus_console.auth.tokens import TokenBook
from nexus_console.config import ConsoleSettings
from nexus_console.context import Console
from nexus_console.live.hub import LiveHub
from nexus_console.metrics import ConsoleMetrics
from nexus_console.reads import Reads
from nexus_console.rendering import environment
from nexus_console.server import WebServer

log = logging.getLogger(__name__)

SOURCE = "console"


class ConsoleApp(ServiceApp):
    """The console service. `bus` may be given (tests); otherwise it is created."""

    def __init__(
        self,
        settings: ConsoleSettings,
        *,
        bus_settings: BusSettings | None = None,
        bus: Bus | None = None,
        clock: Clock | None = None,
    ) -> None:
        super().__init__(SOURCE, bus=bus)
        self.settings = settings
        self.bus_settings = bus_settings
        self.clock = clock or SystemClock()
        self.console: Console | None = None
        self.web: WebServer | None = None

    @property
    def url(self) -> str:
        if self.web is None:
            raise RuntimeError("the console is not started")
        return self.web.url

    def ready(self) -> bool:
        return super().ready() and self.web is not None and self.web.port is not None

    async def open(self, stack: contextlib.AsyncExitStack) -> None:
        s = self.settings
        tokens = TokenBook(s.console_tokens_file)
        if s.console_session_secret is None:
            log.warning(
                "NEXUS_CONSOLE_SESSION_SECRET is not set: sessions end when the console"
                " restarts and are not shared between replicas"
            )
            signer = Signer.random()
        else:
            signer = Signer(s.console_session_secret.get_secret_value().encode())
        bus = await self.open_runtime(stack, s, bus_settings=self.bus_settings, source=SOURCE)
        # Exported to OTLP and/or Prometheus when configured (NEXUS_METRICS_*, OTEL_*).
        provider = setup_metrics(SOURCE, MetricsSettings())
        stack.callback(provider.shutdown)
        hub = LiveHub(bus, queue_size=s.console_live_queue)
        await hub.start()
        stack.push_async_callback(hub.stop)
        self.console = Console(
            settings=s,
            bus=bus,
            reads=Reads(bus.nc, s.console_query_timeout),
            hub=hub,
            templates=environment(),
            signer=signer,
            tokens=tokens,
            clock=self.clock,
            metrics=ConsoleMetrics(provider),
        )
        self.web = WebServer(self.console)
        await self.web.start()
        stack.push_async_callback(self.web.stop)
