"""Input from pages (query strings, forms) checked with pydantic: a bad one is a 400 that
names the field and what is wrong with it."""

from __future__ import annotations

from aiohttp import web
from pydantic import ValidationError


def bad_request(exc: ValidationError) -> web.HTTPBadRequest:
    first = exc.errors(include_url=False)[0]
    where = ".".join(str(p) for p in first["loc"]) or "(input)"
    return web.HTTPBadRequest(text=f"{where}: {first['msg']}")
