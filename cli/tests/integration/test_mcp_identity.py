"""An HTTP token with a `nats_user` acts on its own NATS connection, as that user; a wrong
password is a one-line error. A real nats-server with users (no JetStream needed to connect)."""

from __future__ import annotations

import json
import socket
import subprocess
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from nexus_testing import eventually_blocking, nats_server_binary

from nexus_cli.client import Session
from nexus_cli.errors import CliError
from nexus_cli.mcp.auth import Identity, Scope
from nexus_cli.mcp.state import Nexus
from nexus_cli.target import Target


def _port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@pytest.fixture
def users_server(tmp_path: Path) -> Iterator[tuple[str, int]]:
    port, monitor = _port(), _port()
    conf = tmp_path / "nats.conf"
    conf.write_text(
        f"port: {port}\nhttp_port: {monitor}\n"
        "authorization { users = [\n"
        "  {user: server, password: pw-s}\n"
        "  {user: mcp-op, password: pw-o}\n"
        "] }\n"
    )
    proc = subprocess.Popen(
        [nats_server_binary(), "-c", str(conf)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        eventually_blocking(
            lambda: _accepting(port), within=10, interval=0.05, what="nats-server started"
        )
        yield f"nats://127.0.0.1:{port}", monitor
    finally:
        proc.terminate()
        proc.wait(10)


def _accepting(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.2):
            return True
    except OSError:
        return False


def _users(monitor: int) -> set[str]:
    with urllib.request.urlopen(f"http://127.0.0.1:{monitor}/connz?auth=1", timeout=5) as r:
        conns = json.load(r).get("connections") or []
    return {c.get("authorized_user") for c in conns}


async def test_a_token_acts_as_its_nats_user(users_server: tuple[str, int]) -> None:
    url, monitor = users_server
    target = Target("test", url, None, None)
    own = Session(target, 2.0, user="server", password="pw-s")
    local = Identity(name="x", scope=Scope.READ, requested_by="x")
    async with own:
        nexus = Nexus(target=target, timeout=2.0, session=own, local=local)
        anonymous = Identity(name="ci", scope=Scope.READ, requested_by="mcp:ci")
        assert await nexus.session_for(anonymous) is own  # no nats_user: the server's own
        operator = Identity(
            name="ide",
            scope=Scope.OPERATE,
            requested_by="mcp:ide",
            nats_user="mcp-op",
            nats_password="pw-o",
        )
        first = await nexus.session_for(operator)
        assert first is not own
        assert await nexus.session_for(operator) is first  # one connection per token
        assert _users(monitor) == {"server", "mcp-op"}
        wrong = Identity(
            name="bad",
            scope=Scope.OPERATE,
            requested_by="mcp:bad",
            nats_user="mcp-op",
            nats_password="nope",
        )
        with pytest.raises(CliError) as err:
            await nexus.session_for(wrong)
        assert err.value.message == f"cannot reach NATS at {url}"
        await nexus.close()
