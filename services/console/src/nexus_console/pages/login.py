"""The login form: a bearer token in, a session cookie out; and the logout."""

from __future__ import annotations

import logging
from urllib.parse import urlsplit

from aiohttp import web

from nexus_console.auth.middleware import set_session_cookie
from nexus_console.auth.sessions import COOKIE
from nexus_console.context import console_of
from nexus_console.rendering import render

log = logging.getLogger("nexus_console.audit")

routes = web.RouteTableDef()
MAX_TOKEN = 512


def _next_path(value: object) -> str:
    # Only a path on this site: an absolute URL here would make the login an open redirect.
    text = value if isinstance(value, str) else ""
    parts = urlsplit(text)
    if not text.startswith("/") or text.startswith("//") or parts.scheme or parts.netloc:
        return "/"
    return text


@routes.get("/login")
async def login_form(request: web.Request) -> web.Response:
    console = console_of(request)
    return render(
        request,
        console.templates,
        "login.html",
        next=_next_path(request.query.get("next")),
        error=None,
        tokens_configured=console.settings.console_tokens_file is not None,
    )


@routes.post("/login")
async def login(request: web.Request) -> web.StreamResponse:
    console = console_of(request)
    form = await request.post()
    token = form.get("token")
    next_path = _next_path(form.get("next"))

    def refused(message: str, status: int) -> web.Response:
        return render(
            request, console.templates, "login.html", status=status, next=next_path,
            error=message, tokens_configured=console.settings.console_tokens_file is not None,
        )  # fmt: skip

    if not isinstance(token, str) or not token.strip():
        return refused("enter a token", 400)
    if len(token) > MAX_TOKEN:
        return refused("that is not a console token", 400)
    match = console.tokens.identify(token.strip())
    if match is None:
        log.warning("refused login from %s: unknown token", request.remote)
        return refused("that token is not valid here", 401)
    now = console.clock.now().timestamp()
    ttl = console.settings.console_session_hours * 3600
    session = console.signer.new_session(match.viewer, now, ttl, match.entry)
    viewer = match.viewer
    log.info("%s signed in from %s (%s)", viewer.principal, request.remote, viewer.scope)
    redirect = web.HTTPSeeOther(next_path)
    set_session_cookie(console, redirect, session)
    raise redirect


@routes.post("/logout")
async def logout(request: web.Request) -> web.StreamResponse:
    redirect = web.HTTPSeeOther("/login")
    redirect.del_cookie(COOKIE, path="/")
    raise redirect
