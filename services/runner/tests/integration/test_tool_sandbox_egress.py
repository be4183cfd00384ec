"""The tools' sandbox with egress grants: a shell command in real bubblewrap (no network of its
own) reaches a granted host only through the run's proxy, a path the grant does not cover is
refused, going around the proxy reaches nothing, and every request is an `egress` event."""

from __future__ import annotations

import asyncio
import ipaddress
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from nexus_events.events import RunEgress

from nexus_runner.egress import EgressAccess, run_egress
from nexus_runner.egress.policy import Address
from nexus_runner.errors import ToolError
from nexus_runner.git import Author, Git
from nexus_runner.safety import SecretRegistry
from nexus_runner.tool_sandbox import ToolSandbox
from nexus_runner.tools import ToolContext
from nexus_runner.tools.args import RunShellArgs
from nexus_runner.tools.builtin import run_shell
from nexus_runner.workspace import Workspace

from .support import make_config

# The granted host: a name only the proxy resolves (inside the sandbox nothing resolves, and
# a literal 127.0.0.1 would be NO_PROXY, i.e. the sandbox's own loopback).
HOST = "outside.test"
FETCH = (
    "python3 -c 'import sys, urllib.request as u;"
    " print(u.urlopen(sys.argv[1], timeout=10).read().decode())' "
)
DIRECT = "python3 -c 'import socket; socket.create_connection((\"127.0.0.1\", {port}), timeout=3)'"


async def _outside(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    line = (await reader.readuntil(b"\r\n\r\n")).split(b"\r\n")[0]
    reply = b"outside saw " + line
    writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(reply) + reply)
    await writer.drain()
    writer.close()


async def _resolve(host: str, port: int) -> list[Address]:
    del port
    return [ipaddress.ip_address("127.0.0.1" if host == HOST else host)]


@pytest.fixture
async def outside() -> AsyncIterator[int]:
    server = await asyncio.start_server(_outside, "127.0.0.1", 0)
    yield server.sockets[0].getsockname()[1]
    server.close()


async def _shell(ctx: ToolContext, command: str) -> tuple[bool, str]:
    try:
        return True, await run_shell(ctx, RunShellArgs(command=command))
    except ToolError as exc:
        return False, str(exc)


async def test_a_sandboxed_command_reaches_a_granted_host_only_through_the_proxy(
    tmp_path: Path, outside: int
) -> None:
    root = tmp_path / "runs" / "run-1"
    root.mkdir(parents=True)
    (root / ".git").mkdir()  # a checkout: its .git is bound read-only
    sandbox = ToolSandbox.detect("on", forbidden=[Path.cwd()], private=[tmp_path / "runs"])
    assert sandbox.bwrap is not None, sandbox.reason
    config = make_config(
        "http://127.0.0.1:9/v1",
        egress=[{"host": HOST, "port": outside, "methods": ["GET"], "paths": ["/ok*"]}],
    )
    recorded: list[RunEgress] = []

    async def record(event: RunEgress) -> None:
        recorded.append(event)

    async with run_egress(
        config, runner_urls=[], secrets=SecretRegistry(), record=record, resolve=_resolve
    ) as access:
        assert isinstance(access, EgressAccess)
        ws = Workspace(root)
        ctx = ToolContext(
            workspace=ws,
            git=Git(ws.root, Author("a", "a@x")),
            shell_timeout=30,
            output_cap=20_000,
            home=root.with_name("run-1.home"),
            sandbox=sandbox,
            egress=access,
        )
        allowed = await _shell(ctx, FETCH + f"http://{HOST}:{outside}/ok")
        refused = await _shell(ctx, FETCH + f"http://{HOST}:{outside}/secret")
        around = await _shell(ctx, DIRECT.format(port=outside))
    assert allowed[0], allowed
    assert "outside saw GET /ok HTTP/1.1" in allowed[1]
    assert not refused[0]
    assert "403" in refused[1]
    assert "outside saw" not in refused[1]
    # Without the proxy the sandbox's network namespace has nothing: the host's 127.0.0.1
    # listener is not there.
    assert not around[0]
    assert "ConnectionRefusedError" in around[1] or "refused" in around[1].lower()
    assert sorted((e.host, e.path, e.allowed) for e in recorded) == [
        (HOST, "/ok", True),
        (HOST, "/secret", False),
    ]
