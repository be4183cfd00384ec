"""The dev stack's NATS authenticates like compose and Kubernetes (issue 35): nobody connects
anonymously, each service is its own user with its own permissions, and the admin URL of the
state file is what people and the CLI use."""

from __future__ import annotations

import asyncio
import json
import stat
import time
import urllib.request
from typing import Any
from urllib.parse import urlsplit

import nats
from nexus_events.contract import subjects
from nexus_events.contract.streams import RUNS
from nexus_events.runtime.services import LONG_RUNNING
from nexus_scheduler.run_credentials import RunCredential, mint, token_key

from nexus_cli.devstack.nats_auth import ISSUER_FILE, PASSWORDS_FILE, without_credentials

from .conftest import Stack

# Seconds to wait for the server's -ERR after a publish it refuses.
VIOLATION_WAIT = 5.0


def _urls(stack: Stack) -> tuple[str, str, dict[str, str]]:
    """(the admin URL of the state file, the same URL(s) without credentials, passwords)."""
    admin = stack.state()["nats_url"]
    plain, _, _ = without_credentials(admin)
    passwords = json.loads((stack.home / PASSWORDS_FILE).read_text())
    return admin, plain, passwords


async def _refused_publish(url: str, user: str, password: str, subject: str) -> str:
    """Publish as `user` and return the server's permission error (empty if none came)."""
    refused: asyncio.Queue[Exception] = asyncio.Queue()

    async def on_error(exc: Exception) -> None:
        await refused.put(exc)

    nc = await nats.connect(
        url, user=user, password=password, error_cb=on_error, max_reconnect_attempts=1
    )
    try:
        await nc.publish(subject, b"{}")
        await nc.flush()
        try:
            return str(await asyncio.wait_for(refused.get(), VIOLATION_WAIT))
        except TimeoutError:
            return ""
    finally:
        await nc.close()


def test_an_anonymous_connection_is_refused(stack: Stack) -> None:
    first = urlsplit(stack.state()["nats_url"].split(",")[0])
    host, port = first.hostname, first.port

    async def anonymous() -> bytes:
        # The client protocol by hand (nats-py leaves its socket open after a refused login):
        # the server's INFO, a CONNECT without credentials and a PING; then its verdict.
        reader, writer = await asyncio.open_connection(host, port)
        try:
            assert (await reader.readline()).startswith(b"INFO ")
            writer.write(b'CONNECT {"verbose":false,"pedantic":false}\r\nPING\r\n')
            await writer.drain()
            return await asyncio.wait_for(reader.readline(), VIOLATION_WAIT)
        finally:
            writer.close()
            await writer.wait_closed()

    answer = asyncio.run(anonymous())
    assert answer.startswith(b"-ERR 'Authorization Violation'"), answer


def test_a_service_user_may_not_publish_outside_its_permissions(stack: Stack) -> None:
    _, plain, passwords = _urls(stack)
    # core decides no approval.
    core = asyncio.run(_refused_publish(plain, "core", passwords["core"], subjects.inbox("run-x")))
    assert 'permissions violation for publish to "agent.inbox.v1.run-x"' in core
    # A subject of its own goes through: the refusals above are the permissions, not the login.
    own = subjects.run_event("run-x", "prepared")
    assert asyncio.run(_refused_publish(plain, "core", passwords["core"], own)) == ""


def test_a_runner_connects_only_with_its_runs_own_credential(stack: Stack) -> None:
    """No static `runner` user any more: the stack's auth callout (the scheduler) admits a
    credential minted with the stack's issuer for one run, scoped to that run."""
    _, plain, _ = _urls(stack)
    seed = (stack.home / ISSUER_FILE).read_text().strip().encode()
    assert stat.S_IMODE((stack.home / ISSUER_FILE).stat().st_mode) == 0o600
    run = RunCredential("run-own", 1, frozenset(), int(time.time()) + 600)
    user, password = mint(token_key(seed), run)
    own = subjects.run_event("run-own", "turn")
    assert asyncio.run(_refused_publish(plain, user, password, own)) == ""
    for subject in (
        subjects.inbox("run-own"),  # its own approval: only people's surfaces decide
        subjects.run_event("run-other", "turn"),
        subjects.run_event("run-new", "requested"),
    ):
        refused = asyncio.run(_refused_publish(plain, user, password, subject))
        assert f'permissions violation for publish to "{subject}"' in refused, subject

    async def connects(user: str, password: str) -> bool:
        # The client protocol by hand: nats-py leaves its socket open after a refused login.
        first = urlsplit(plain.split(",")[0])
        reader, writer = await asyncio.open_connection(first.hostname, first.port)
        try:
            assert (await reader.readline()).startswith(b"INFO ")
            login = json.dumps({"verbose": False, "user": user, "pass": password})
            writer.write(f"CONNECT {login}\r\nPING\r\n".encode())
            await writer.drain()
            answer = await asyncio.wait_for(reader.readline(), VIOLATION_WAIT)
        finally:
            writer.close()
            await writer.wait_closed()
        return answer.startswith(b"PONG")

    user_again, password_again = mint(token_key(seed), run)
    assert asyncio.run(connects(user_again, password_again))  # the probe itself can succeed
    forged = RunCredential("run-own", 1, frozenset(), int(time.time()) + 600)
    assert not asyncio.run(connects(*mint(b"not the stack's key" * 2, forged)))
    assert not asyncio.run(connects("runner", "anything"))  # the old static user is gone


def test_the_admin_url_of_the_state_file_reads_and_publishes(stack: Stack) -> None:
    admin, _, passwords = _urls(stack)
    assert admin.startswith(f"nats://admin:{passwords['admin']}@127.0.0.1:")

    async def as_admin() -> tuple[str, int]:
        nc = await nats.connect(admin, max_reconnect_attempts=1)
        try:
            js = nc.jetstream()
            info = await js.stream_info(RUNS)
            ack = await js.publish(subjects.run_event("run-admin", "cancel_requested"), b"{}")
            return info.config.name or "", ack.seq
        finally:
            await nc.close()

    name, seq = asyncio.run(as_admin())
    assert name == RUNS
    assert seq > 0


def test_each_service_connects_as_its_own_user(stack: Stack) -> None:
    state = stack.state()
    with urllib.request.urlopen(
        state["nats_monitor_url"] + "/connz?auth=true&limit=1024", timeout=5
    ) as resp:
        connz: dict[str, Any] = json.load(resp)
    users = {c.get("authorized_user") for c in connz["connections"]}
    started = {s.nats_user for s in LONG_RUNNING if s.name in state["services"]}
    assert started <= users, f"connected users: {users}"
    assert None not in users
    assert "" not in users
    # The monitoring port answers without credentials, on loopback only (as on compose).
    assert state["nats_monitor_url"].startswith("http://127.0.0.1:")


def test_secrets_stay_private_and_out_of_the_human_status(stack: Stack) -> None:
    _, _, passwords = _urls(stack)
    for name in ("state.json", PASSWORDS_FILE):
        assert stat.S_IMODE((stack.home / name).stat().st_mode) == 0o600, name
    shown = stack.process("dev", "up")  # already up: prints where everything is
    assert shown.code == 0, shown.stderr
    assert "nats://admin:***@127.0.0.1:" in shown.stdout
    assert passwords["admin"] not in shown.stdout + shown.stderr
    # Machines get the URL they connect with, as the state file (mode 0600) holds it.
    machine = stack.process("dev", "status", "-o", "json")
    assert machine.code == 0, machine.stderr
    assert machine.json()["nats_url"] == stack.state()["nats_url"]
    logs = "".join(p.read_text(errors="replace") for p in (stack.home / "logs").glob("*.log"))
    assert not any(pw in logs for pw in passwords.values())
