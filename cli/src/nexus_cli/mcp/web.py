"""Streamable HTTP at /mcp behind bearer tokens, and /healthz."""

from __future__ import annotations

import logging
from typing import Any

from starlette.types import ASGIApp, Receive, Scope, Send

from nexus_cli.mcp.auth import Tokens, unauthorized_body

log = logging.getLogger("nexus_cli.mcp")

HEALTH_PATH = "/healthz"


class BearerAuth:
    """Refuse (401, one-line JSON) every HTTP request but /healthz without a known token."""

    def __init__(self, app: ASGIApp, tokens: Tokens) -> None:
        self.app = app
        self.tokens = tokens

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("path") == HEALTH_PATH:
            await self.app(scope, receive, send)
            return
        header = _header(scope, b"authorization")
        if header is None:
            await _refuse(send, "missing bearer token (Authorization: Bearer <token>)")
            return
        if self.tokens.from_header(header) is None:
            log.info("refused a request with an unknown token")
            await _refuse(send, "invalid bearer token")
            return
        await self.app(scope, receive, send)


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope.get("headers") or []:
        if key.lower() == name:
            return bytes(value).decode("latin-1")
    return None


async def _refuse(send: Send, message: str) -> None:
    body = unauthorized_body(message)
    headers: list[Any] = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        (b"www-authenticate", b'Bearer realm="nexus"'),
    ]
    await send({"type": "http.response.start", "status": 401, "headers": headers})
    await send({"type": "http.response.body", "body": body})
