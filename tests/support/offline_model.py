"""The dev stack's offline model (`nexus_cli.devstack.offline_model`) served in the test's own
event loop: the integration tests that follow its scripts talk to the same server
`nexus dev up --offline-model` starts."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from nexus_cli.devstack.offline_model import Server


@asynccontextmanager
async def offline_model() -> AsyncIterator[str]:
    """Serve the offline model on a free port of 127.0.0.1; yields its base URL (``.../v1``)."""
    server = await asyncio.start_server(Server().handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    async with server:
        yield f"http://127.0.0.1:{port}/v1"
