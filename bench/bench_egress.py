"""A small GET through the tools' egress proxy beside the same GET made directly, same run.

A local HTTP server on 127.0.0.1 stands for the outside. Each GET is a new connection (the
proxy carries one request per connection):
- direct: TCP to the server;
- proxy: over the proxy's unix socket (checks, resolving, the event handed to a recorder);
- relay: TCP to the in-sandbox relay (nexus_events.runtime.netrelay inner, a separate process) on
  to the proxy's socket: the path a tool's HTTP client takes.
"""

from __future__ import annotations

import asyncio
import ipaddress
import shutil
import socket
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from nexus_events.events import EgressGrant, RunEgress
from nexus_runner.egress import EgressAccess, EgressProxy
from nexus_runner.egress.policy import Address
from nexus_runner.safety import SecretRegistry

N = 400
BODY = b"x" * 512


async def _serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    await reader.readuntil(b"\r\n\r\n")
    writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n" % len(BODY))
    writer.write(BODY)
    await writer.drain()
    writer.close()


async def _get(
    open_conn: Callable[[], Awaitable[tuple[asyncio.StreamReader, asyncio.StreamWriter]]],
    request: bytes,
) -> None:
    reader, writer = await open_conn()
    writer.write(request)
    data = await reader.read()
    writer.close()
    assert data.startswith(b"HTTP/1.1 200"), data[:200]
    assert data.endswith(BODY), data[:200]


async def _times(n: int, fn: Callable[[], Awaitable[None]]) -> list[float]:
    out = []
    for _ in range(n):
        start = time.perf_counter()
        await fn()
        out.append((time.perf_counter() - start) * 1e6)
    return sorted(out)


def _pct(times: list[float], p: float) -> float:
    return times[min(len(times) - 1, int(len(times) * p))]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def _resolve(host: str, port: int) -> list[Address]:
    del host, port
    return [ipaddress.ip_address("127.0.0.1")]


async def run() -> list[tuple[str, float, str, float]]:
    server = await asyncio.start_server(_serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    recorded: list[RunEgress] = []

    async def record(event: RunEgress) -> None:
        recorded.append(event)

    net_dir = Path(tempfile.mkdtemp(prefix="nx-b-"))
    grants = [EgressGrant(host="pkgs.bench.test", port=port, methods=["GET"], paths=["/simple/*"])]
    proxy = EgressProxy(grants, secrets=SecretRegistry(), record=record, resolve=_resolve)
    access = EgressAccess(net_dir, _free_port())
    await proxy.start(access.socket_path)
    # The relay runs until its child ends: a child waiting on its stdin.
    relay = await asyncio.create_subprocess_exec(
        *access.relay_argv(),
        sys.executable,
        "-c",
        "import sys; sys.stdin.read()",
        stdin=asyncio.subprocess.PIPE,
    )
    direct_req = b"GET /simple/x HTTP/1.1\r\nHost: pkgs.bench.test\r\nConnection: close\r\n\r\n"
    proxy_req = (
        f"GET http://pkgs.bench.test:{port}/simple/x HTTP/1.1\r\nHost: pkgs.bench.test\r\n\r\n"
    ).encode()

    async def direct() -> None:
        await _get(lambda: asyncio.open_connection("127.0.0.1", port), direct_req)

    async def proxied() -> None:
        await _get(lambda: asyncio.open_unix_connection(str(access.socket_path)), proxy_req)

    async def relayed() -> None:
        await _get(lambda: asyncio.open_connection("127.0.0.1", access.port), proxy_req)

    try:
        for _ in range(200):  # the relay listens a moment after it starts
            try:
                await relayed()
                break
            except OSError:
                await asyncio.sleep(0.02)
        for fn in (direct, proxied, relayed):
            await _times(20, fn)  # warm-up
        d = await _times(N, direct)
        p = await _times(N, proxied)
        r = await _times(N, relayed)
    finally:
        assert relay.stdin is not None
        relay.stdin.close()
        await asyncio.wait_for(relay.wait(), 10)
        await proxy.close()
        server.close()
        shutil.rmtree(net_dir, ignore_errors=True)
    assert all(e.allowed and e.status == 200 for e in recorded), recorded[-1:]
    return [
        ("GET direct p50, us", _pct(d, 0.5), "", 0.0),
        ("GET direct p99, us", _pct(d, 0.99), "", 0.0),
        ("GET through the proxy p50, us", _pct(p, 0.5), "direct", _pct(p, 0.5) / _pct(d, 0.5)),
        ("GET through the proxy p99, us", _pct(p, 0.99), "direct", _pct(p, 0.99) / _pct(d, 0.99)),
        ("GET relay + proxy p50, us", _pct(r, 0.5), "direct", _pct(r, 0.5) / _pct(d, 0.5)),
        ("GET relay + proxy p99, us", _pct(r, 0.99), "direct", _pct(r, 0.99) / _pct(d, 0.99)),
        ("egress events recorded", float(len(recorded)), "", 0.0),
    ]
