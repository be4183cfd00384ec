"""The pages' templates (Jinja2, autoescaped) and the filters they share."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import jinja2
from aiohttp import web

from nexus_console.context import CSRF, VIEWER, console_of
from nexus_console.sleep_view import wake_label


def _when(value: object) -> str:
    if value is None or value == "":
        return ""
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value)
        except ValueError:
            return str(value)
    if isinstance(value, datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=UTC)
        return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S")
    return str(value)


def _usd(value: Any) -> str:
    try:
        return f"${float(value):.4f}"
    except (TypeError, ValueError):
        return ""


def _pretty(value: Any) -> str:
    return json.dumps(value, indent=2, sort_keys=True, default=str)


def environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("nexus_console", "templates"),
        autoescape=jinja2.select_autoescape(default=True, default_for_string=True),
        # Pages show whatever the streams hold: a field an event or a reply left out renders
        # empty instead of failing the page.
        undefined=jinja2.ChainableUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        enable_async=False,
    )
    env.filters["when"] = _when
    env.filters["usd"] = _usd
    env.filters["pretty"] = _pretty
    # `{{ run.sleeping_until | wake(now) }}`: `now` is the console's clock, given to every page.
    env.filters["wake"] = wake_label
    return env


def render_text(env: jinja2.Environment, name: str, **context: Any) -> str:
    return env.get_template(name).render(**context)


def render(
    request: web.Request, env: jinja2.Environment, name: str, status: int = 200, **context: Any
) -> web.Response:
    """A page: `name` with the request's viewer, CSRF token and the console's `now` in its
    context."""
    context.setdefault("viewer", request.get(VIEWER))
    context.setdefault("csrf", request.get(CSRF, ""))
    context.setdefault("path", request.path)
    context.setdefault("path_qs", request.path_qs)
    context.setdefault("now", console_of(request).clock.now())
    return web.Response(
        text=render_text(env, name, **context), status=status, content_type="text/html"
    )
