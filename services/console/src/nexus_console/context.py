"""What every page handler reaches through its request: the bus, the queries, the live
feed, the templates, the sign-in pieces and the settings."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import jinja2
from aiohttp import web
from nexus_events.runtime.clock import Clock
from nexus_events.transport.bus import Bus

from nexus_console.auth.identity import Viewer
from nexus_console.auth.sessions import Session, Signer
from nexus_console.auth.tokens import TokenBook
from nexus_console.config import ConsoleSettings
from nexus_console.metrics import ConsoleMetrics
from nexus_console.reads import Reads

if TYPE_CHECKING:
    from nexus_console.live.hub import LiveHub


@dataclass
class Console:
    settings: ConsoleSettings
    bus: Bus
    reads: Reads
    hub: LiveHub
    templates: jinja2.Environment
    signer: Signer
    tokens: TokenBook
    clock: Clock
    metrics: ConsoleMetrics


CONSOLE = web.AppKey("console", Console)
# Set by the auth middleware on every request past the login.
VIEWER = web.RequestKey("viewer", Viewer)
SESSION = web.RequestKey("session", Session)
CSRF = web.RequestKey("csrf", str)


def console_of(request: web.Request) -> Console:
    return request.app[CONSOLE]


def viewer_of(request: web.Request) -> Viewer:
    """The signed-in user (the auth middleware put them there: every page but the login has
    one)."""
    viewer: Viewer | None = request.get(VIEWER)
    if viewer is None:
        raise web.HTTPUnauthorized(text="sign in first")
    return viewer


def session_of(request: web.Request) -> Session:
    session: Session | None = request.get(SESSION)
    if session is None:
        raise web.HTTPUnauthorized(text="sign in first")
    return session
