"""The two ends of a confined runner's only way out (stdlib only: run by path, ``python -I``).

A confined runner lives in a network namespace of its own, where nothing but loopback exists.
Its allowed endpoints (NATS, the model, the git remote, ...) are reached in two hops:

- ``inner`` runs inside the sandbox, listens on the loopback address and port the runner
  dials for each endpoint (the sandbox's ``/etc/hosts`` maps the endpoint's host name to that
  address) and passes every connection to the endpoint's unix socket in the net dir;
- ``outer`` runs outside, listens on those unix sockets (the net dir is bind-mounted
  read-only into the sandbox) and connects each to exactly its ``host:port``.

So a connection the runner opens either hits one of these listeners, and goes to its one
allowed destination, or finds nothing at all: the namespace has no route anywhere else.

Both ends start their child (``outer``: bwrap; ``inner``: the runner), keep relaying until it
exits and exit as it did. bwrap dies of SIGTERM without passing it on, taking the sandbox
with it, so ``outer`` starts bwrap in a process group of its own, catches SIGTERM, SIGINT and
SIGHUP (the runtime signals its process group: only ``outer`` is in it) and passes them over
``ctl.sock`` to ``inner``, which signals the runner; the relays keep carrying its last events
out while it shuts down. SIGKILL of ``outer`` ends everything: bwrap's --die-with-parent,
and the runtime kills what is left of the session.

The runner runs ``inner`` alone in its tools' sandbox (``nexus_runner.egress``): there the
one route is ``egress=127.0.0.1:<port>``, the tools' HTTP proxy, whose unix socket the runner's
egress proxy listens on; no ``ctl.sock`` exists, so no signal is forwarded.

Usage::

    netrelay.py outer NET_DIR NAME=HOST:PORT ... -- CHILD...
    netrelay.py inner NET_DIR NAME=ADDR:PORT ... -- CHILD...
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import signal
import sys
from collections.abc import Awaitable, Callable, Sequence

_CHUNK = 65536
_CTL = "ctl.sock"
_Opener = Callable[[], Awaitable[tuple[asyncio.StreamReader, asyncio.StreamWriter]]]


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(_CHUNK):
            writer.write(data)
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()  # a half-close reaches the other side
    except (ConnectionError, OSError):
        writer.close()


async def _serve(
    open_peer: _Opener, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
) -> None:
    try:
        peer_reader, peer_writer = await open_peer()
    except OSError:
        writer.close()  # the endpoint is down: the runner sees a reset, as it would anyway
        return
    try:
        await asyncio.gather(_pipe(reader, peer_writer), _pipe(peer_reader, writer))
    except asyncio.CancelledError:
        pass  # the relay is exiting (its child ended): no traceback on the child's stderr
    finally:
        for w in (writer, peer_writer):
            w.close()
            with contextlib.suppress(ConnectionError, OSError):
                await w.wait_closed()


def _split(target: str) -> tuple[str, int]:
    host, _, port = target.rpartition(":")
    return host.strip("[]"), int(port)


async def _start(mode: str, net_dir: str, routes: Sequence[str]) -> list[asyncio.Server]:
    servers = []
    for route in routes:
        name, _, target = route.partition("=")
        host, port = _split(target)
        sock = os.path.join(net_dir, f"{name}.sock")
        if mode == "outer":
            opener = functools.partial(asyncio.open_connection, host, port)
            with contextlib.suppress(FileNotFoundError):
                os.unlink(sock)
            server = await asyncio.start_unix_server(functools.partial(_serve, opener), sock)
        else:
            opener = functools.partial(asyncio.open_unix_connection, sock)
            server = await asyncio.start_server(functools.partial(_serve, opener), host, port)
        servers.append(server)
    return servers


class _Signals:
    """Outside: signals the relay receives, passed to the inner relay over ``ctl.sock``."""

    def __init__(self) -> None:
        self.pending: list[int] = []
        self.peers: list[asyncio.StreamWriter] = []

    def send(self, signum: int) -> None:
        if not self.peers:
            self.pending.append(signum)  # the inner relay connects in a moment
        for peer in self.peers:
            peer.write(f"{signum}\n".encode())

    async def accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.peers.append(writer)
        for signum in self.pending:
            writer.write(f"{signum}\n".encode())
        self.pending.clear()
        await reader.read()  # until the inner relay exits


async def _forward_signals(net_dir: str, proc: asyncio.subprocess.Process) -> None:
    """Inside: each signal the outer relay received goes to the child (the runner)."""
    try:
        reader, _ = await asyncio.open_unix_connection(os.path.join(net_dir, _CTL))
    except OSError:
        return
    while line := await reader.readline():
        with contextlib.suppress(ProcessLookupError, ValueError):
            proc.send_signal(int(line))


async def _main(argv: Sequence[str]) -> int:
    mode, net_dir, *rest = argv
    split = rest.index("--")
    routes, child = rest[:split], rest[split + 1 :]
    cwd = os.getcwd()
    if mode == "outer":
        os.makedirs(net_dir, mode=0o700, exist_ok=True)
        # A unix socket's path is at most 107 bytes, and a run dir under a deep
        # NEXUS_LOCAL_WORKDIR passes that: bind by names relative to the net dir instead.
        os.chdir(net_dir)
        net_dir = "."
    servers = await _start(mode, net_dir, routes)
    loop = asyncio.get_running_loop()
    signals = _Signals()
    if mode == "outer":
        ctl = os.path.join(net_dir, _CTL)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(ctl)
        servers.append(await asyncio.start_unix_server(signals.accept, ctl))
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        # Outside, passed on (see the module's doc); inside, nothing signals the relay's group.
        loop.add_signal_handler(sig, signals.send, sig)
    # Outside, bwrap gets a process group of its own: a signal to the runtime's group would
    # kill it (it forwards none), and with it the sandbox, before the runner could stop.
    proc = await asyncio.create_subprocess_exec(
        *child, cwd=cwd, process_group=0 if mode == "outer" else None
    )
    forwarder = asyncio.create_task(_forward_signals(net_dir, proc)) if mode == "inner" else None
    code = await proc.wait()
    if mode == "outer" and code > 128:  # bwrap exits 128 + N when its child died of signal N
        code = -(code - 128)
    if forwarder is not None:
        forwarder.cancel()
    for server in servers:
        server.close()
    return code


def main() -> None:
    try:
        code = asyncio.run(_main(sys.argv[1:]))
    except (ValueError, OSError) as exc:
        print(f"netrelay: {exc}", file=sys.stderr)
        sys.exit(125)
    if code < 0:  # killed by a signal: end the same way, so the runtime reads the same exit
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    sys.exit(code)


if __name__ == "__main__":
    main()
