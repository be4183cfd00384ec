"""The tools' only way out: an HTTP/1.1 forward proxy on a unix socket, run by the runner.

Plain ``http://`` requests (absolute-form) are checked whole (host, port, method, path, and
no secret value of the run in the request line, headers or body) and passed on one per
connection; ``CONNECT host:port`` opens a tunnel after checking host and port only. The
runner resolves the name, checks every address (`policy.check_destination`) and connects to
one of them; redirects are the client's business (a proxy follows none). Every request,
allowed or refused, is one `egress` run event, recorded when it ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import os
import socket
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from nexus_events.errors import NexusError
from nexus_events.events import EgressGrant, RunEgress

from nexus_runner.egress import http1
from nexus_runner.egress.policy import Address, Reserved, check_destination, decide
from nexus_runner.safety import SecretRegistry

log = logging.getLogger(__name__)

Record = Callable[[RunEgress], Awaitable[None]]
Resolve = Callable[[str, int], Awaitable[list[Address]]]
_CHUNK = 65536


@dataclass(frozen=True)
class ProxyLimits:
    """Bounds of the proxy; each a guess at what a package index or a test API needs."""

    max_connections: int = 64  # at once: pip opens a handful, a runaway loop many more
    head_bytes: int = 32768  # a request head larger than this is not an HTTP client's
    body_bytes: int = 8_000_000  # a plain-http body is read whole to look for secrets
    head_timeout: float = 15.0  # to send the request head (and body)
    connect_timeout: float = 10.0  # to resolve and connect to the destination
    idle_timeout: float = 120.0  # with no byte in either direction, the exchange ends


async def resolve_host(host: str, port: int) -> list[Address]:
    """The runner's resolver (the tools never resolve names): every address of `host`."""
    infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(ipaddress.ip_address(str(info[4][0])) for info in infos))


async def record_safely(record: Record, event: RunEgress) -> None:
    """Record `event`; a bus failure is logged, never the tools' problem (the run's publisher
    fails the run on its next event anyway)."""
    try:
        await record(event)
    except NexusError as exc:
        log.warning("egress event not recorded: %s", exc)


@dataclass(frozen=True)
class _Allowed:
    """A request that passed every check: the grant's phrase, where to connect, its body."""

    reason: str
    addresses: list[Address]
    body: bytes


@dataclass
class _Exchange:
    """What one connection did, for its event."""

    head: http1.RequestHead
    started: float
    up: int = 0
    down: int = 0
    status: int | None = None
    gone_out: bool = False  # it passed every check and the proxy dialled the destination


class EgressProxy:
    """One run's proxy. `start(path)` listens; `close()` stops and ends open exchanges."""

    def __init__(
        self,
        grants: Sequence[EgressGrant],
        *,
        secrets: SecretRegistry,
        record: Record,
        reserved: Reserved | None = None,
        limits: ProxyLimits | None = None,
        resolve: Resolve = resolve_host,
    ) -> None:
        self.grants = list(grants)
        self.secrets = secrets
        self.record = record
        self.reserved = reserved or Reserved()
        self.limits = limits or ProxyLimits()
        self.resolve = resolve
        self.active = 0
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._closing = False

    async def start(self, path: Path) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
        self._server = await asyncio.start_unix_server(
            self._accept, str(path), limit=self.limits.head_bytes
        )
        os.chmod(path, 0o600)  # the runner's user only (the tools' sandbox runs as it)

    async def close(self) -> None:
        self._closing = True
        if self._server is not None:
            self._server.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._tasks.add(task)
        try:
            await self._serve_and_close(reader, writer)
        except asyncio.CancelledError:
            if not self._closing:
                raise
            # Ended by `close` (the run is over): asyncio would log a cancelled connection
            # task as an error.
        finally:
            if task is not None:
                self._tasks.discard(task)

    async def _serve_and_close(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        self.active += 1
        try:
            await self._serve(reader, writer)
        except (ConnectionError, OSError, TimeoutError, asyncio.IncompleteReadError) as exc:
            log.debug("egress connection ended: %s", exc)
        finally:
            self.active -= 1  # before the client can see the end and open another
            writer.close()
            with contextlib.suppress(ConnectionError, OSError):
                await writer.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        limits = self.limits
        try:
            data = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), limits.head_timeout)
            head = http1.parse_head(data)
        except (asyncio.LimitOverrunError, asyncio.IncompleteReadError, TimeoutError) as exc:
            writer.write(http1.refusal(400, f"no complete request head: {type(exc).__name__}"))
            return
        except http1.BadRequest as exc:
            writer.write(http1.refusal(400, str(exc)))
            return
        ex = _Exchange(head, time.monotonic())
        try:
            checked = await self._check(head, reader)
            if not isinstance(checked, _Allowed):
                ex.status, reason = checked
                writer.write(http1.refusal(ex.status, reason))
                await self._record(ex, allowed=False, reason=reason)
                return
            await self._forward(ex, checked, reader, writer)
        except (ConnectionError, OSError, TimeoutError, asyncio.IncompleteReadError) as exc:
            # The client went away or stalled (sending its body, say): still one event.
            why = f"ended early: {type(exc).__name__}"
            await self._record(ex, allowed=ex.gone_out, reason=why)
        except asyncio.CancelledError:
            await self._record(ex, allowed=ex.gone_out, reason="ended with the run")
            raise

    async def _check(  # noqa: PLR0911 - one refusal per check, in the order they are made
        self, head: http1.RequestHead, reader: asyncio.StreamReader
    ) -> tuple[int, str] | _Allowed:
        """Why the request is refused (status, reason), or how it goes; reads a plain body."""
        if self.active > self.limits.max_connections:
            return 503, f"more than {self.limits.max_connections} egress connections at once"
        verdict = decide(self.grants, head.scheme, head.host, head.port, head.method, head.path)
        if not verdict.allowed or verdict.grant is None:
            return 403, verdict.reason
        body = b""
        if head.scheme == "http":
            if head.header("transfer-encoding") is not None:
                return 411, "chunked request bodies are not taken: send a Content-Length"
            length = head.header("content-length") or "0"
            if not length.isdigit() or int(length) > self.limits.body_bytes:
                return 413, f"a request body is at most {self.limits.body_bytes} bytes"
            body = await asyncio.wait_for(reader.readexactly(int(length)), self.limits.head_timeout)
        if self.secrets.contains(head.raw) or self.secrets.contains(body.decode(errors="replace")):
            return 403, "refused: the request carries a value this run keeps secret"
        try:
            addresses = await asyncio.wait_for(
                self.resolve(head.host, head.port), self.limits.connect_timeout
            )
        except (OSError, TimeoutError, ValueError) as exc:
            return 502, f"cannot resolve {head.host}: {exc}"
        why = check_destination(verdict.grant, head.host, head.port, addresses, self.reserved)
        if why is not None:
            return 403, why
        return _Allowed(verdict.reason, addresses, body)

    async def _forward(
        self,
        ex: _Exchange,
        allowed: _Allowed,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
    ) -> None:
        reason, addresses, body = allowed.reason, allowed.addresses, allowed.body
        head = ex.head
        ex.gone_out = True
        try:
            up_reader, up_writer = await asyncio.wait_for(
                asyncio.open_connection(str(addresses[0]), head.port),
                self.limits.connect_timeout,
            )
        except (OSError, TimeoutError) as exc:
            ex.status = 502 if isinstance(exc, OSError) else 504
            message = f"cannot connect to {head.host}:{head.port}: {exc or 'timed out'}"
            writer.write(http1.refusal(ex.status, message))
            await self._record(ex, allowed=True, reason=f"{reason}; {message}")
            return
        try:
            if head.scheme == "https":
                writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
                await asyncio.gather(
                    self._pipe(reader, up_writer, ex, "up"),
                    self._pipe(up_reader, writer, ex, "down"),
                )
            else:
                request = http1.forwarded_head(head, len(body)) + body
                up_writer.write(request)
                ex.up += len(request)
                await self._pipe(up_reader, writer, ex, "down")
        finally:
            up_writer.close()
            with contextlib.suppress(ConnectionError, OSError):
                await up_writer.wait_closed()
        await self._record(ex, allowed=True, reason=reason)

    async def _pipe(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        ex: _Exchange,
        direction: str,
    ) -> None:
        try:
            while data := await asyncio.wait_for(reader.read(_CHUNK), self.limits.idle_timeout):
                if direction == "up":
                    ex.up += len(data)
                else:
                    if ex.down == 0 and ex.head.scheme == "http":
                        ex.status = http1.status_of(data)
                    ex.down += len(data)
                writer.write(data)
                await writer.drain()
            if writer.can_write_eof():
                writer.write_eof()  # a half-close reaches the other side
        except (ConnectionError, OSError, TimeoutError):
            writer.close()

    async def _record(self, ex: _Exchange, *, allowed: bool, reason: str) -> None:
        head = ex.head
        await record_safely(
            self.record,
            RunEgress(
                via="proxy",
                scheme=head.scheme,
                host=head.host[:253],
                port=head.port,
                method=head.method[:16],
                path=head.path[:1000] if head.scheme == "http" else None,
                allowed=allowed,
                reason=reason,
                status=ex.status,
                bytes_up=ex.up,
                bytes_down=ex.down,
                duration_ms=int((time.monotonic() - ex.started) * 1000),
            ),
        )
