"""The control channel of a runner that starts while JetStream cannot answer (a leader
election on a cluster, where its API times out or says no responders for seconds) waits it
out instead of crashing the runner (issue 27: a runner started during a meta-leader
election exited 1 with a traceback and its run was resumed).

Here JetStream is away for real: a nats-server without JetStream listens first, then is
replaced on the same port by one with it; the runner's connection reconnects."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from pathlib import Path

import pytest
from nexus_events.contract import subjects
from nexus_events.contract.streams import ensure_streams
from nexus_events.events.inbox import InboxMessage
from nexus_events.transport.bus import Bus, BusSettings
from nexus_testing import NatsServer, eventually, free_port, nats_server_binary

from nexus_runner.control import RunControl


def _greets(port: int) -> bool:
    with (
        contextlib.suppress(OSError),
        socket.create_connection(("127.0.0.1", port), timeout=0.2) as conn,
    ):
        return conn.recv(4).startswith(b"INFO")
    return False


async def test_the_control_channel_waits_for_jetstream_to_answer(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="nexus_runner.followed")
    port = free_port()
    plain = await asyncio.create_subprocess_exec(
        nats_server_binary(), "-a", "127.0.0.1", "-p", str(port),
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL,
    )  # fmt: skip
    server = NatsServer(tmp_path / "js", port)
    try:
        await eventually(lambda: _greets(port), what="the server without JetStream")
        settings = BusSettings(url=f"nats://127.0.0.1:{port}", publish_deadline=30)
        bus = await Bus.connect(settings, source="runner")
        control = RunControl(bus, "run_election")
        starting = asyncio.create_task(control.start())
        try:
            await eventually(
                lambda: any("JetStream busy" in r.getMessage() for r in caplog.records),
                what="the control channel retrying",
            )
            assert not starting.done()
            plain.terminate()
            await asyncio.wait_for(plain.wait(), 10)
            await asyncio.to_thread(server.start)
            admin = await Bus.connect(BusSettings(url=server.url), source="test")
            try:
                await ensure_streams(admin.js)
                await asyncio.wait_for(starting, 30)
                await admin.publish(
                    subjects.inbox("run_election"), InboxMessage(text="hello", sender="ann")
                )
                await asyncio.wait_for(control.message_arrived.wait(), 10)
            finally:
                await admin.close()
            assert [m.text for m in control.received] == ["hello"]
        finally:
            starting.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await starting
            await control.stop()
            await bus.close()
    finally:
        if plain.returncode is None:
            plain.kill()
            await plain.wait()
        server.stop()
    assert not [r for r in caplog.records if r.exc_info], "a traceback was logged"
