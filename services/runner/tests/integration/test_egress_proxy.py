"""The tools' egress proxy on real sockets: a local HTTP server and a TCP echo server stand for
the outside; every request, allowed or refused, is one `egress` event; the relay the tools'
sandbox runs (nexus_events.runtime.netrelay inner) carries a real HTTP client's request to it."""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import shutil
import socket
import subprocess
import sys
import tempfile
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from nexus_events.events import EgressGrant, RunConfig, RunEgress

from nexus_runner.egress import EgressAccess, EgressProxy, ProxyLimits, Reserved, run_egress
from nexus_runner.egress.policy import Address
from nexus_runner.safety import SecretRegistry

SECRET = "sk-live-0123456789abcdef"
TLS_BYTES = b"\x16\x03\x01 opaque to the proxy"
# Names the runner's resolver maps to the local servers (the tools never resolve: the proxy
# does, and a test gives it these answers instead of DNS).
NAMES = {"pkgs.example.test": "127.0.0.1", "mirror.example.test": "127.0.0.1"}


async def _resolve(host: str, port: int) -> list[Address]:
    del port
    if host in NAMES:
        return [ipaddress.ip_address(NAMES[host])]
    return [ipaddress.ip_address(host)]  # an address literal, or ValueError: not resolvable


async def _http_outside(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """The outside's web server: answers each request with its line and Host header."""
    head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1")
    length = next(
        (
            int(h.split(":")[1])
            for h in head.split("\r\n")
            if h.lower().startswith("content-length")
        ),
        0,
    )
    body = await reader.readexactly(length)
    line = head.split("\r\n")[0]
    host = next(
        h.split(":", 1)[1].strip() for h in head.split("\r\n") if h.lower().startswith("host:")
    )
    reply = f"{line} host={host} body={body.decode()}".encode()
    writer.write(
        b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n" % len(reply) + reply
    )
    await writer.drain()
    writer.close()


async def _echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    while data := await reader.read(65536):
        writer.write(data)
        await writer.drain()
    writer.close()


@dataclass
class Outside:
    http_port: int
    echo_port: int


@pytest.fixture
async def outside() -> AsyncIterator[Outside]:
    web = await asyncio.start_server(_http_outside, "127.0.0.1", 0)
    echo = await asyncio.start_server(_echo, "127.0.0.1", 0)
    yield Outside(web.sockets[0].getsockname()[1], echo.sockets[0].getsockname()[1])
    web.close()
    echo.close()


@pytest.fixture
def net_dir() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="nx-t-"))  # a unix socket path is under 108 bytes
    yield path
    shutil.rmtree(path, ignore_errors=True)


@dataclass
class Running:
    proxy: EgressProxy
    socket: Path
    events: list[RunEgress]
    recorded: asyncio.Event


@contextlib.asynccontextmanager
async def _proxy(
    net_dir: Path, grants: list[EgressGrant], **kwargs: object
) -> AsyncIterator[Running]:
    events: list[RunEgress] = []
    recorded = asyncio.Event()

    async def record(event: RunEgress) -> None:
        events.append(event)
        recorded.set()

    secrets = SecretRegistry()
    secrets.add(SECRET)
    proxy = EgressProxy(grants, secrets=secrets, record=record, resolve=_resolve, **kwargs)  # type: ignore[arg-type]
    path = net_dir / "egress.sock"
    await proxy.start(path)
    yield Running(proxy, path, events, recorded)
    await proxy.close()


async def ask(running: Running, request: bytes) -> tuple[int, bytes]:
    """One exchange over the proxy's socket: the status and body of its answer."""
    reader, writer = await asyncio.open_unix_connection(str(running.socket))
    writer.write(request)
    await writer.drain()
    data = await asyncio.wait_for(reader.read(), 10)
    writer.close()
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split(b" ")[1]), body


def get(url: str, method: str = "GET", extra: str = "", body: str = "") -> bytes:
    length = f"Content-Length: {len(body)}\r\n" if body else ""
    return f"{method} {url} HTTP/1.1\r\nHost: x\r\n{extra}{length}\r\n{body}".encode()


async def settled(running: Running, count: int) -> list[RunEgress]:
    """The events once `count` are recorded (the proxy records as each exchange ends)."""
    async with asyncio.timeout(10):
        while len(running.events) < count:
            running.recorded.clear()
            await running.recorded.wait()
    return running.events


async def test_a_granted_get_passes_and_everything_else_is_refused_each_an_event(
    outside: Outside, net_dir: Path
) -> None:
    port = outside.http_port
    grants = [
        EgressGrant(host="pkgs.example.test", port=port, methods=["GET"], paths=["/simple/*"])
    ]
    async with _proxy(net_dir, grants) as running:
        status, body = await ask(running, get(f"http://pkgs.example.test:{port}/simple/x?q=1"))
        assert status == 200
        # Origin-form to the destination, the Host the URL names (never the client's).
        assert body == f"GET /simple/x?q=1 HTTP/1.1 host=pkgs.example.test:{port} body=".encode()
        refused = [
            get(f"http://pkgs.example.test:{port}/other"),  # path outside the globs
            get(f"http://pkgs.example.test:{port}/simple/x", "POST", body="a=1"),  # method
            get(f"http://mirror.example.test:{port}/simple/x"),  # host without a grant
            get(f"http://pkgs.example.test:{outside.echo_port}/simple/x"),  # another port
        ]
        answers = [await ask(running, r) for r in refused]
        assert [s for s, _ in answers] == [403, 403, 403, 403]
        assert b"outside its egress grant" in answers[0][1]
        assert b"no egress grant for mirror.example.test" in answers[2][1]
        events = await settled(running, 5)
    ok = events[0]
    assert (ok.via, ok.scheme, ok.host, ok.port, ok.method, ok.path, ok.allowed, ok.status) == (
        "proxy", "http", "pkgs.example.test", port, "GET", "/simple/x", True, 200,
    )  # fmt: skip
    assert ok.bytes_up > 0
    assert ok.bytes_down > len(body)
    assert ok.reason.startswith("grant pkgs.example.test")
    assert [(e.allowed, e.status, e.method, e.host) for e in events[1:]] == [
        (False, 403, "GET", "pkgs.example.test"),
        (False, 403, "POST", "pkgs.example.test"),
        (False, 403, "GET", "mirror.example.test"),
        (False, 403, "GET", "pkgs.example.test"),
    ]
    assert all(e.bytes_up == 0 and e.reason for e in events[1:])


async def test_connect_tunnels_bytes_to_a_granted_port_only(
    outside: Outside, net_dir: Path
) -> None:
    grants = [
        EgressGrant(host="pkgs.example.test", port=outside.echo_port),
        # Method/path rules cannot be checked inside TLS: such a grant never opens a tunnel.
        EgressGrant(host="mirror.example.test", port=outside.echo_port, paths=["/simple/*"]),
    ]
    async with _proxy(net_dir, grants) as running:
        reader, writer = await asyncio.open_unix_connection(str(running.socket))
        writer.write(f"CONNECT pkgs.example.test:{outside.echo_port} HTTP/1.1\r\n\r\n".encode())
        assert (await reader.readuntil(b"\r\n\r\n")).startswith(b"HTTP/1.1 200")
        writer.write(TLS_BYTES)
        assert await asyncio.wait_for(reader.readexactly(len(TLS_BYTES)), 5) == TLS_BYTES
        writer.write_eof()
        assert await asyncio.wait_for(reader.read(), 5) == b""
        writer.close()
        other = await ask(
            running, f"CONNECT pkgs.example.test:{outside.http_port} HTTP/1.1\r\n\r\n".encode()
        )
        ruled = await ask(
            running, f"CONNECT mirror.example.test:{outside.echo_port} HTTP/1.1\r\n\r\n".encode()
        )
        events = await settled(running, 3)
    assert other[0] == 403
    assert b"no egress grant" in other[1]
    assert ruled[0] == 403
    assert b"cannot be checked" in ruled[1]
    assert b"grant the host without them" in ruled[1]
    tunnel = events[0]
    assert (tunnel.scheme, tunnel.method, tunnel.path, tunnel.allowed) == (
        "https",
        "CONNECT",
        None,
        True,
    )
    assert (tunnel.bytes_up, tunnel.bytes_down) == (len(TLS_BYTES), len(TLS_BYTES))
    assert [e.allowed for e in events] == [True, False, False]


async def test_a_request_carrying_a_secret_is_refused(outside: Outside, net_dir: Path) -> None:
    port = outside.http_port
    grants = [EgressGrant(host="pkgs.example.test", port=port)]
    async with _proxy(net_dir, grants) as running:
        leaks = [
            get(f"http://pkgs.example.test:{port}/?k={SECRET}"),
            get(f"http://pkgs.example.test:{port}/", extra=f"Authorization: Bearer {SECRET}\r\n"),
            get(f"http://pkgs.example.test:{port}/", "POST", body=f"token={SECRET}"),
        ]
        answers = [await ask(running, r) for r in leaks]
        clean = await ask(running, get(f"http://pkgs.example.test:{port}/", "POST", body="a=1"))
        events = await settled(running, 4)
    assert [s for s, _ in answers] == [403, 403, 403]
    assert all(b"keeps secret" in b for _, b in answers)
    assert clean[0] == 200
    assert clean[1].endswith(b"body=a=1")
    assert [e.allowed for e in events] == [False, False, False, True]


async def test_private_destinations_need_a_grant_naming_them_and_the_runners_never(
    outside: Outside, net_dir: Path
) -> None:
    port = outside.http_port
    grants = [
        EgressGrant(host="*.example.test", port=port),  # a wildcard: resolves to loopback here
        EgressGrant(host="127.0.0.1", port=port),  # named exactly
        EgressGrant(host="127.0.0.1", port=outside.echo_port),  # named, but the runner's
    ]
    reserved = Reserved.of([("127.0.0.1", outside.echo_port)])
    async with _proxy(net_dir, grants, reserved=reserved) as running:
        wild = await ask(running, get(f"http://pkgs.example.test:{port}/"))
        named = await ask(running, get(f"http://127.0.0.1:{port}/"))
        mapped = await ask(running, get(f"http://[::ffff:127.0.0.1]:{port}/"))
        runners = await ask(running, get(f"http://127.0.0.1:{outside.echo_port}/"))
        events = await settled(running, 4)
    assert wild[0] == 403
    assert b"non-public address 127.0.0.1" in wild[1]
    assert named[0] == 200
    assert mapped[0] == 403  # not the granted literal, and never a way round it
    assert runners[0] == 403
    assert b"runner's own endpoint" in runners[1]
    assert [e.allowed for e in events] == [False, True, False, False]


async def test_bad_requests_and_the_connection_limit_get_answers_not_a_dead_proxy(
    outside: Outside, net_dir: Path
) -> None:
    port = outside.http_port
    grants = [EgressGrant(host="pkgs.example.test", port=port)]
    limits = ProxyLimits(max_connections=1, head_timeout=0.5)
    async with _proxy(net_dir, grants, limits=limits) as running:
        assert (await ask(running, b"garbage\r\n\r\n"))[0] == 400
        assert (await ask(running, b"GET https://pkgs.example.test/ HTTP/1.1\r\n\r\n"))[0] == 400
        assert (await ask(running, b"CONNECT nowhere HTTP/1.1\r\n\r\n"))[0] == 400
        assert (await ask(running, b"GET /relative HTTP/1.1\r\n\r\n"))[0] == 400
        assert (await ask(running, b"GET http://x/" + b"a" * 40000 + b" HTTP/1.1\r\n\r\n"))[
            0
        ] == 400
        chunked = get(f"http://pkgs.example.test:{port}/", "POST", "Transfer-Encoding: chunked\r\n")
        assert (await ask(running, chunked))[0] == 411
        # A silent client is dropped after the head timeout, answered 400.
        assert (await ask(running, b"GET http://pkgs"))[0] == 400
        # One connection held open: the next is over the limit and refused at once.
        held, held_w = await asyncio.open_unix_connection(str(running.socket))
        held_w.write(f"CONNECT pkgs.example.test:{port} HTTP/1.1\r\n".encode())
        await held_w.drain()
        over = await ask(running, get(f"http://pkgs.example.test:{port}/"))
        held_w.write_eof()
        assert (await held.read()).startswith(b"HTTP/1.1 400")  # the proxy let it go
        held_w.close()
        assert over[0] == 503
        assert b"at once" in over[1]
        assert (await ask(running, get(f"http://pkgs.example.test:{port}/")))[0] == 200
        # A body that never comes: the exchange ends at the timeout, and is still an event.
        reader, writer = await asyncio.open_unix_connection(str(running.socket))
        writer.write(get(f"http://pkgs.example.test:{port}/slow", "POST", "Content-Length: 9\r\n"))
        assert await asyncio.wait_for(reader.read(), 5) == b""
        writer.close()
        events = await settled(running, 4)
    assert [(e.path, e.allowed, e.status) for e in events] == [
        ("/", False, 411),
        ("/", False, 503),
        ("/", True, 200),
        ("/slow", False, None),
    ]
    assert events[3].reason == "ended early: TimeoutError"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def test_a_real_client_in_the_relay_reaches_the_proxy_through_the_env_it_is_given(
    outside: Outside, net_dir: Path
) -> None:
    port = outside.http_port
    config = RunConfig(
        run_id="r",
        agent_id="a",
        system_prompt="s",
        model={"name": "m", "base_url": f"http://127.0.0.1:{outside.echo_port}/v1"},
        egress=[EgressGrant(host="pkgs.example.test", port=port)],
    )
    events: list[RunEgress] = []

    async def record(event: RunEgress) -> None:
        events.append(event)

    runner_urls = [config.model.base_url]
    async with run_egress(
        config, runner_urls=runner_urls, secrets=SecretRegistry(), record=record, resolve=_resolve
    ) as started:
        assert isinstance(started, EgressAccess)
        assert started.socket_path.is_socket()
        access = EgressAccess(started.net_dir, _free_port())
        client = (
            "import urllib.request as u\n"
            f"url = 'http://pkgs.example.test:{port}/simple/'\n"
            "print(u.urlopen(url, timeout=10).read().decode())\n"
            "try:\n"
            f"    u.urlopen('http://127.0.0.1.nip.example:{outside.echo_port}/v1', timeout=10)\n"
            "except Exception as e:\n"
            "    print('refused', getattr(e, 'code', e))\n"
        )
        # The relay listens a moment after it starts: the client retries its first connect.
        argv = [*access.relay_argv(), sys.executable, "-I", "-c", _retrying(client)]
        done = await asyncio.to_thread(
            subprocess.run, argv, env=access.env(), capture_output=True, text=True, timeout=60
        )
    assert done.returncode == 0, done.stderr
    assert f"GET /simple/ HTTP/1.1 host=pkgs.example.test:{port}" in done.stdout
    assert "refused 403" in done.stdout
    assert [(e.host, e.allowed) for e in events] == [
        ("pkgs.example.test", True), ("127.0.0.1.nip.example", False),
    ]  # fmt: skip
    assert not access.net_dir.exists()  # the socket's dir goes with the run's proxy


def _retrying(client: str) -> str:
    return (
        "import socket, time, os\n"
        "port = int(os.environ['HTTP_PROXY'].rsplit(':', 1)[1])\n"
        "for _ in range(200):\n"
        "    try:\n"
        "        socket.create_connection(('127.0.0.1', port), 1).close(); break\n"
        "    except OSError:\n"
        "        time.sleep(0.02)\n"
    ) + client


async def test_no_grant_no_proxy() -> None:
    config = RunConfig(run_id="r", agent_id="a", system_prompt="s", model={"name": "m"})

    async def record(event: RunEgress) -> None:
        raise AssertionError(event)

    async with run_egress(
        config, runner_urls=[], secrets=SecretRegistry(), record=record
    ) as access:
        assert access is None


async def test_a_tunnel_open_when_the_run_ends_is_closed_and_recorded(
    outside: Outside, net_dir: Path
) -> None:
    grants = [EgressGrant(host="pkgs.example.test", port=outside.echo_port)]
    async with _proxy(net_dir, grants) as running:
        reader, writer = await asyncio.open_unix_connection(str(running.socket))
        writer.write(f"CONNECT pkgs.example.test:{outside.echo_port} HTTP/1.1\r\n\r\n".encode())
        await reader.readuntil(b"\r\n\r\n")
        writer.write(TLS_BYTES)
        assert await asyncio.wait_for(reader.readexactly(len(TLS_BYTES)), 5) == TLS_BYTES
        await running.proxy.close()  # the run ends with the tunnel open
        assert await asyncio.wait_for(reader.read(), 5) == b""
        writer.close()
    [event] = running.events
    assert (event.allowed, event.reason, event.bytes_up) == (
        True,
        "ended with the run",
        len(TLS_BYTES),
    )
