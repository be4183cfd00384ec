"""The console's web server: the aiohttp application (middlewares, pages, static files) and
its listening socket."""

from __future__ import annotations

import logging
import time
from importlib.resources import files

from aiohttp import web

from nexus_console.auth.middleware import Handler, require_identity
from nexus_console.context import CONSOLE, Console, console_of
from nexus_console.errors import error_pages
from nexus_console.pages import ROUTES

log = logging.getLogger(__name__)

# Most bytes of a request body (forms are small; nothing uploads).
MAX_BODY = 256 * 1024
SHUTDOWN_TIMEOUT = 2.0


def static_dir() -> str:
    return str(files("nexus_console") / "static")


@web.middleware
async def measured(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Count each request by its route template (never the raw path: ids would make the
    label unbounded) and status class, and time it unless it is a live feed."""
    started = time.monotonic()
    resource = request.match_info.route.resource
    route = resource.canonical if resource is not None else "unmatched"
    try:
        response = await handler(request)
    except web.HTTPException as exc:  # redirects (the login's, a form's) travel as raises
        console_of(request).metrics.request(route, exc.status, time.monotonic() - started)
        raise
    live = response.content_type == "text/event-stream"
    elapsed = None if live else time.monotonic() - started
    console_of(request).metrics.request(route, response.status, elapsed)
    return response


# Every answer: scripts only from the console itself (the vendored ones included), no framing
# by another site (its buttons cancel runs and answer approvals), forms posting only here.
# Inline styles stay allowed: htmx adds one for its request indicators.
SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; script-src 'self'; style-src 'self'"
    " 'unsafe-inline'; img-src 'self' data:; connect-src 'self'; frame-ancestors 'none';"
    " base-uri 'none'; form-action 'self'",
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
}


async def _secure(request: web.Request, response: web.StreamResponse) -> None:
    for name, value in SECURITY_HEADERS.items():
        response.headers.setdefault(name, value)


def build_app(console: Console) -> web.Application:
    app = web.Application(
        middlewares=[measured, error_pages, require_identity], client_max_size=MAX_BODY
    )
    app.on_response_prepare.append(_secure)
    app[CONSOLE] = console
    for table in ROUTES:
        app.router.add_routes(table)
    app.router.add_static("/static/", static_dir(), append_version=True)
    return app


class WebServer:
    """Serves `build_app(console)` on the console's host and port until stopped."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.port: int | None = None
        self._runner: web.AppRunner | None = None

    async def start(self) -> None:
        s = self.console.settings
        runner = web.AppRunner(
            build_app(self.console), handle_signals=False, shutdown_timeout=SHUTDOWN_TIMEOUT
        )
        await runner.setup()
        site = web.TCPSite(runner, s.console_host, s.console_port)
        try:
            await site.start()
        except OSError as exc:
            await runner.cleanup()
            raise OSError(
                exc.errno,
                f"console cannot listen on {s.console_host}:{s.console_port}: "
                f"{exc.strerror or exc}; choose another NEXUS_CONSOLE_PORT (0 = any free one)",
            ) from exc
        self._runner = runner
        self.port = runner.addresses[0][1]
        log.info("console at %s", self.url)

    @property
    def url(self) -> str:
        s = self.console.settings
        if s.console_public_url:
            return s.console_public_url.rstrip("/")
        host = "127.0.0.1" if s.console_host in ("0.0.0.0", "") else s.console_host  # noqa: S104
        return f"http://{host}:{self.port}"

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
