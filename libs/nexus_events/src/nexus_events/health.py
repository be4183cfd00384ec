"""A minimal HTTP health endpoint for probes: ``/healthz`` (alive) and ``/readyz`` (ready).

Each service passes its own `ready()` (core: NATS connected and every component running;
scheduler: NATS connected and campaigning for the lease). Port 0 picks a free port, which
`port` then holds.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import Annotated, Any

from pydantic import BeforeValidator

from nexus_events.errors import HealthUnavailable

_REASONS = {200: "OK", 404: "Not Found", 503: "Service Unavailable"}
_OFF = frozenset({"", "off", "none"})


def _off_is_none(value: Any) -> Any:
    # An environment variable cannot hold None: "off" (or empty, or "none") turns it off.
    if isinstance(value, str) and value.strip().lower() in _OFF:
        return None
    return value


# A settings field for the endpoint's port: a number (0 = any free port) or off (None;
# "off", "none" or empty from the environment).
HealthPort = Annotated[int | None, BeforeValidator(_off_is_none)]


class HealthServer:
    """Serves ``/healthz`` (200 while the process answers) and ``/readyz`` (200 while `ready()`
    holds, else 503) until stopped."""

    def __init__(self, ready: Callable[[], bool], host: str, port: int) -> None:
        self.ready = ready
        self.host = host
        self.port = port
        self._server: asyncio.Server | None = None

    async def start(self) -> None:
        """Listen; raise `HealthUnavailable` if the address cannot be had."""
        try:
            self._server = await asyncio.start_server(self._handle, self.host, self.port)
        except OSError as exc:
            raise HealthUnavailable(
                exc.errno,
                f"health endpoint cannot listen on {self.host}:{self.port}: {exc.strerror or exc};"
                " choose another port (0 = any free one) or turn it off",
            ) from exc
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            async with asyncio.timeout(5):
                line = await reader.readline()
                while (await reader.readline()) not in (b"\r\n", b"\n", b""):
                    pass
            parts = line.decode("latin-1").split()
            path = parts[1] if len(parts) > 1 else ""
            if path == "/healthz":
                status = 200
            elif path == "/readyz":
                status = 200 if self.ready() else 503
            else:
                status = 404
            body = _REASONS[status].lower().encode()
            writer.write(
                f"HTTP/1.1 {status} {_REASONS[status]}\r\nContent-Type: text/plain\r\n"
                f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
                + body
            )
            await writer.drain()
        except (TimeoutError, OSError, UnicodeDecodeError):
            pass
        finally:
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()


__all__ = ["HealthPort", "HealthServer"]
