"""The HTTP health endpoint for probes (aiohttp.web): ``/healthz`` (alive) and ``/readyz``
(ready), and `JetStreamProbe`, which tells readiness whether JetStream can store.

Each service passes its own `ready()` (core: NATS connected and every component running;
scheduler: NATS connected and campaigning for the lease). Port 0 picks a free port, which
`port` then holds.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from aiohttp import web
from nats.js import JetStreamContext

from nexus_events.contract.streams import StorageProblem, meta_problem, storage_problem
from nexus_events.errors import HealthUnavailable
from nexus_events.runtime.periodic import PeriodicTask
from nexus_events.runtime.settings import HealthPort

log = logging.getLogger(__name__)

# Seconds a stop waits for probe requests in flight (they answer at once) before closing.
SHUTDOWN_TIMEOUT = 1.0


class HealthServer:
    """Serves ``/healthz`` (200 while the process answers) and ``/readyz`` (200 while `ready()`
    holds, else 503) with aiohttp.web until stopped; any other path is 404."""

    def __init__(self, ready: Callable[[], bool], host: str, port: int) -> None:
        self.ready = ready
        self.host = host
        self.port = port
        self._runner: web.AppRunner | None = None

    async def start(self) -> None:
        """Listen; raise `HealthUnavailable` if the address cannot be had."""
        app = web.Application()
        app.router.add_get("/healthz", self._live)
        app.router.add_get("/readyz", self._readiness)
        # No access log: probes every few seconds would drown the service's own lines.
        runner = web.AppRunner(
            app, access_log=None, handle_signals=False, shutdown_timeout=SHUTDOWN_TIMEOUT
        )
        await runner.setup()
        site = web.TCPSite(runner, self.host, self.port)
        try:
            await site.start()
        except OSError as exc:
            await runner.cleanup()
            raise HealthUnavailable(
                exc.errno,
                f"health endpoint cannot listen on {self.host}:{self.port}: {exc.strerror or exc};"
                " choose another port (0 = any free one) or turn it off",
            ) from exc
        self._runner = runner
        self.port = runner.addresses[0][1]

    async def stop(self) -> None:
        runner, self._runner = self._runner, None
        if runner is not None:
            await runner.cleanup()

    async def _live(self, _: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def _readiness(self, _: web.Request) -> web.Response:
        if self.ready():
            return web.Response(text="ok")
        return web.Response(status=503, text="service unavailable")


class JetStreamProbe:
    """Checks every `interval` seconds that JetStream's meta group has a leader and each of
    `streams` has one (JetStream can store in it and make consumers); `ok` is False from the
    first check that finds one missing, with `problem` saying why (no quorum, no meta leader,
    no such stream), and True again by itself at the first check after that passes. A
    service's ``ready()`` adds ``and probe.ok``.

    Only leader changes are logged (one line each way), never with a traceback: an election
    is an expected event in a cluster, not an error of this process.
    """

    def __init__(
        self, js: JetStreamContext, streams: Sequence[str], *, interval: float = 2.0
    ) -> None:
        self.js = js
        self.streams = list(streams)
        self.interval = interval
        self.problem: StorageProblem | None = None
        self.checks = 0
        # Each check is bounded (see `check`); one in hand is cut on stop.
        self._checks = PeriodicTask(
            self.check,
            interval,
            name="jetstream probe",
            first="after_interval",
            stop_grace=0,
            logger=log,
        )

    @property
    def ok(self) -> bool:
        return self.problem is None

    async def check(self) -> StorageProblem | None:
        """Ask once (each stream in turn, bounded); update and return `problem`."""
        found = await meta_problem(self.js)
        for stream in self.streams if found is None else ():
            found = await storage_problem(self.js, stream)
            if found is not None:
                break
        if found is not None and self.problem is None:
            log.warning("JetStream cannot store: %s", found.message)
        elif found is None and self.problem is not None:
            log.info("JetStream stores again (%s)", ", ".join(self.streams))
        self.problem = found
        self.checks += 1
        return found

    async def start(self) -> None:
        """Check once now, then every `interval` seconds in a task until `stop`."""
        await self.check()
        self._checks.start()

    async def stop(self) -> None:
        await self._checks.stop()


__all__ = ["HealthPort", "HealthServer", "JetStreamProbe"]
