"""Every failure a page can meet shown as a page: 400 with the reason, 403, 404, the 503 of
a service that does not answer; anything unexpected is a 500 page and a logged traceback,
and the console stays up."""

from __future__ import annotations

import logging

from aiohttp import web

from nexus_console.auth.middleware import Handler
from nexus_console.context import console_of
from nexus_console.reads import QueryError
from nexus_console.rendering import render

log = logging.getLogger(__name__)

TITLES = {
    400: "Bad request",
    401: "Sign in first",
    403: "Not allowed",
    404: "Not found",
    405: "Method not allowed",
    409: "Conflict",
    413: "Too large",
    502: "A service answered badly",
    503: "A service is unavailable",
}


def _wants_fragment(request: web.Request) -> bool:
    return request.headers.get("HX-Request") == "true"


def error_page(request: web.Request, status: int, message: str) -> web.Response:
    if _wants_fragment(request) or request.path.startswith("/live/"):
        return web.Response(text=message, status=status, content_type="text/plain")
    console = console_of(request)
    return render(
        request,
        console.templates,
        "error.html",
        status=status,
        title=TITLES.get(status, "Error"),
        message=message,
    )


@web.middleware
async def error_pages(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        return await handler(request)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        return error_page(request, exc.status, exc.text or exc.reason)
    except QueryError as exc:
        return error_page(request, exc.status, exc.message)
    except Exception:
        log.exception("%s %s failed", request.method, request.path_qs)
        return error_page(request, 500, "the console failed on this page; the log says why")
