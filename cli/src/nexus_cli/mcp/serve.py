"""Running the server: on stdio (an IDE's subprocess) or on streamable HTTP."""

from __future__ import annotations

import logging

import uvicorn
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from nexus_cli.client import Session, whoami
from nexus_cli.commands.approvals import cli_user
from nexus_cli.mcp.auth import Identity, Scope, Tokens
from nexus_cli.mcp.server import build_server
from nexus_cli.mcp.state import Nexus
from nexus_cli.mcp.web import HEALTH_PATH, BearerAuth
from nexus_cli.target import Target

log = logging.getLogger("nexus_cli.mcp")


def _session(target: Target, timeout: float) -> Session:
    return Session(target, timeout, name="nexus-mcp", persistent=True)


async def serve_stdio(target: Target, query_wait: float) -> None:
    """stdio: the person who started it, with scope operate and the CLI's NATS identity."""
    async with _session(target, query_wait) as s:
        local = Identity(name=cli_user(target), scope=Scope.OPERATE, requested_by=whoami())
        nexus = Nexus(target=target, timeout=query_wait, session=s, local=local)
        server, watchers = build_server(nexus)
        try:
            await server.run_stdio_async()
        finally:
            watchers.close()
            await nexus.close()


async def serve_http(
    target: Target, query_wait: float, host: str, port: int, tokens: Tokens
) -> None:
    async with _session(target, query_wait) as s:
        # Never used for a request (each carries its token); the default of `Nexus.identity`.
        nobody = Identity(name="anonymous", scope=Scope.READ, requested_by="mcp:anonymous")
        nexus = Nexus(target=target, timeout=query_wait, session=s, local=nobody, tokens=tokens)
        server, watchers = build_server(nexus)

        async def healthz(_: Request) -> Response:
            if s.bus.nc.is_connected:
                return JSONResponse({"status": "ok"})
            return JSONResponse({"status": "nats disconnected"}, status_code=503)

        server.custom_route(HEALTH_PATH, methods=["GET"])(healthz)

        app = BearerAuth(server.streamable_http_app(host=host), tokens)
        config = uvicorn.Config(app, host=host, port=port, log_level="warning", lifespan="on")
        log.warning("nexus mcp: http://%s:%d/mcp (%d tokens)", host, port, len(tokens))
        try:
            await uvicorn.Server(config).serve()
        finally:
            watchers.close()
            await nexus.close()
