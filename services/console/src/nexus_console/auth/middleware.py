"""Nothing is shown or done without an identity: the middleware that finds who a request
comes from (the trusted proxy header, else the session cookie), sends the rest to the login,
and checks the CSRF token of every request that changes something."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from ipaddress import ip_address
from urllib.parse import quote

from aiohttp import web

from nexus_console.auth.identity import Scope, Via, Viewer
from nexus_console.auth.sessions import COOKIE, Session
from nexus_console.context import CSRF, SESSION, VIEWER, Console, console_of

log = logging.getLogger("nexus_console.audit")

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

# Reachable without a session: the login itself and the pages' static files.
PUBLIC_PREFIXES = ("/static/",)
PUBLIC_PATHS = frozenset({"/login", "/favicon.ico"})
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
CSRF_FIELD = "csrf"
CSRF_HEADER = "X-CSRF-Token"


def _from_trusted_proxy(console: Console, request: web.Request) -> Viewer | None:
    s = console.settings
    if not s.console_trusted_header or not s.console_trusted_proxies:
        return None
    name = request.headers.get(s.console_trusted_header, "").strip()
    peer = request.remote
    if not name or peer is None:
        return None
    try:
        address = ip_address(peer)
    except ValueError:
        return None
    if not any(address in network for network in s.console_trusted_proxies):
        # The header from anywhere else is anyone's to forge: ignored, and said once per try.
        log.warning("ignored %s from untrusted address %s", s.console_trusted_header, peer)
        return None
    if len(name) > 128 or not name.isprintable():
        return None
    return Viewer(name, Scope(s.console_trusted_scope), Via.PROXY)


def _session(console: Console, request: web.Request) -> Session | None:
    now = console.clock.now().timestamp()
    session = console.signer.session(request.cookies.get(COOKIE), now)
    if session is None:
        return None
    if session.viewer.via is Via.TOKEN and not (
        session.entry and console.tokens.still_valid(session.entry)
    ):
        return None  # the token was removed from the file: its sessions end
    return session


def set_session_cookie(console: Console, response: web.StreamResponse, session: Session) -> None:
    s = console.settings
    response.set_cookie(
        COOKIE,
        console.signer.cookie(session),
        max_age=int(s.console_session_hours * 3600),
        httponly=True,
        samesite="Strict",
        secure=s.console_secure_cookie,
        path="/",
    )


def refuse(request: web.Request, viewer: Viewer | None, what: str, why: str) -> web.HTTPForbidden:
    """A 403 for `what`, audited (who, from where, what, why)."""
    who = viewer.principal if viewer else "anonymous"
    log.warning("refused %s %s to %s from %s: %s", request.method, what, who, request.remote, why)
    return web.HTTPForbidden(text=f"refused: {why}")


@web.middleware
async def require_identity(request: web.Request, handler: Handler) -> web.StreamResponse:
    if request.path in PUBLIC_PATHS or request.path.startswith(PUBLIC_PREFIXES):
        return await handler(request)
    console = console_of(request)
    proxied = _from_trusted_proxy(console, request)
    session = _session(console, request)
    fresh: Session | None = None
    if proxied is not None and (session is None or session.viewer != proxied):
        now = console.clock.now().timestamp()
        ttl = console.settings.console_session_hours * 3600
        session = fresh = console.signer.new_session(proxied, now, ttl, None)
    if session is None:
        if request.method in SAFE_METHODS and "text/event-stream" not in request.headers.get(
            "Accept", ""
        ):
            raise web.HTTPSeeOther(f"/login?next={quote(request.path_qs, safe='')}")
        raise web.HTTPUnauthorized(text="sign in first")
    if session.viewer.via is Via.PROXY and proxied is None:
        # A proxy user's cookie is good only with the header: the proxy is the authority.
        raise web.HTTPSeeOther("/login")
    request[VIEWER] = session.viewer
    request[SESSION] = session
    request[CSRF] = console.signer.csrf(session)
    if request.method not in SAFE_METHODS:
        presented = request.headers.get(CSRF_HEADER)
        if presented is None and request.content_type in (
            "application/x-www-form-urlencoded",
            "multipart/form-data",
        ):
            form = await request.post()
            value = form.get(CSRF_FIELD)
            presented = value if isinstance(value, str) else None
        if not console.signer.csrf_ok(session, presented):
            raise refuse(request, session.viewer, request.path, "missing or wrong CSRF token")
    response = await handler(request)
    if fresh is not None and not response.prepared:
        set_session_cookie(console, response, fresh)
    return response
