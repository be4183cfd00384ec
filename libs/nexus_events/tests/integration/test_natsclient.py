"""Direct delivery (`Client.subscribe_direct`) against a real nats-server: the same messages as
nats-py's callback delivery, status replies included, and nothing after unsubscribing."""

from __future__ import annotations

import asyncio
import json
import uuid

import nats
from nats.aio.msg import Msg
from nexus_events.contract.streams import RUNS
from nexus_events.transport.bus import Bus
from nexus_events.transport.natsclient import Client
from nexus_events.transport.pull import PullReader

from .test_pull import beats, consumer


async def connected(url: str, errors: list[Exception] | None = None) -> Client:
    nc = Client()

    async def on_error(exc: Exception) -> None:
        if errors is not None:
            errors.append(exc)

    await nc.connect(url, error_cb=on_error)
    return nc


class Collected(list[Msg]):
    """A direct handler that keeps what it is given and can be awaited for a count."""

    def __init__(self) -> None:
        super().__init__()
        self._grew = asyncio.Event()

    def __call__(self, m: Msg) -> None:
        self.append(m)
        self._grew.set()

    async def wait_for(self, count: int, within: float = 5.0) -> None:
        async with asyncio.timeout(within):
            while len(self) < count:
                self._grew.clear()
                await self._grew.wait()


def fields(m: Msg) -> tuple[str, str, bytes, dict[str, str] | None]:
    return m.subject, m.reply, m.data, m.headers


async def test_direct_and_callback_delivery_see_the_same_messages(nats_url: str):
    nc = await connected(nats_url)
    try:
        subject = f"direct.{uuid.uuid4().hex[:8]}"
        direct = Collected()
        queued: list[Msg] = []
        done = asyncio.Event()

        async def on_queued(m: Msg) -> None:
            queued.append(m)
            if len(queued) == 4:
                done.set()

        await nc.subscribe_direct(subject, direct)
        await nc.subscribe(subject, cb=on_queued)
        await nc.publish(subject, b"plain")
        await nc.publish(subject, b"with reply", reply="inbox.1")
        await nc.publish(subject, b"", headers={"Nats-Msg-Id": "a", "Nexus-Source": "test"})
        await nc.publish(subject, b"{}", headers={"Kept": " spaced ", "Other": "x"})
        await asyncio.wait_for(done.wait(), 5)
        assert [fields(m) for m in direct] == [fields(m) for m in queued]
        assert direct[2].headers == {"Nats-Msg-Id": "a", "Nexus-Source": "test"}
        assert direct[3].headers == {"Kept": "spaced", "Other": "x"}
        assert nc.stats["in_msgs"] == 8
    finally:
        await nc.close()


async def test_status_replies_reach_a_direct_subscription_parsed(bus: Bus, nats_url: str):
    name = await consumer(bus, f"r{uuid.uuid4().hex[:8]}")  # a run with no events
    nc = await connected(nats_url)
    try:
        got = Collected()
        inbox = nc.new_inbox()
        await nc.subscribe_direct(inbox, got)
        await nc.publish(
            f"$JS.API.CONSUMER.MSG.NEXT.{RUNS}.{name}",
            json.dumps({"batch": 1, "no_wait": True}).encode(),
            reply=inbox,
        )
        await got.wait_for(1)
        assert got[0].headers is not None
        assert got[0].headers["Status"] == "404"
        assert got[0].data == b""
    finally:
        await nc.close()


async def test_unsubscribed_direct_handler_gets_nothing_more(nats_url: str):
    nc = await connected(nats_url)
    try:
        subject = f"direct.{uuid.uuid4().hex[:8]}"
        got = Collected()
        sub = await nc.subscribe_direct(subject, got)
        await nc.publish(subject, b"1")
        await got.wait_for(1)
        await sub.unsubscribe()
        assert nc._direct == {}
        # A plain subscription proves the next message went out and came back.
        later: asyncio.Future[Msg] = asyncio.get_running_loop().create_future()

        async def on_later(m: Msg) -> None:
            later.set_result(m)

        await nc.subscribe(subject, cb=on_later)
        await nc.publish(subject, b"2")
        await asyncio.wait_for(later, 5)
        assert [m.data for m in got] == [b"1"]
    finally:
        await nc.close()


async def test_a_failing_direct_handler_is_reported_and_delivery_goes_on(nats_url: str):
    errors: list[Exception] = []
    nc = await connected(nats_url, errors)
    try:
        subject = f"direct.{uuid.uuid4().hex[:8]}"
        got = Collected()

        def handler(m: Msg) -> None:
            if m.data == b"bad":
                raise ValueError("handler broke")
            got(m)

        await nc.subscribe_direct(subject, handler)
        for body in (b"1", b"bad", b"2"):
            await nc.publish(subject, body)
        await got.wait_for(2)
        assert [m.data for m in got] == [b"1", b"2"]
        assert [str(e) for e in errors] == ["handler broke"]
        assert nc.is_connected
    finally:
        await nc.close()


async def test_a_plain_nats_py_client_still_reads_through_pull_reader(bus: Bus, nats_url: str):
    run_id = f"r{uuid.uuid4().hex[:8]}"
    await beats(bus, run_id, 3)
    name = await consumer(bus, run_id)
    plain = await nats.connect(nats_url)
    try:
        async with PullReader(plain, RUNS, name) as reader:
            msgs = await reader.fetch(10, 2.0)
        assert [json.loads(m.data)["seq"] for m in msgs] == [1, 2, 3]
    finally:
        await plain.close()


async def test_without_direct_delivery_subscribe_direct_falls_back_to_a_callback(
    nats_url: str, monkeypatch
):
    """What a nats-py whose private methods drifted gets: the same messages, nats-py's path."""
    from nexus_events.transport import natsclient

    monkeypatch.setattr(natsclient, "DIRECT_DELIVERY", False)
    nc = await connected(nats_url)
    try:
        subject = f"fallback.{uuid.uuid4().hex[:8]}"
        got = Collected()
        await nc.subscribe_direct(subject, got)
        assert nc._direct == {}  # not registered for the read loop's direct path
        await nc.publish(subject, b"one", headers={"Nats-Msg-Id": "a"})
        await nc.publish(subject, b"two")
        await got.wait_for(2)
        assert [(m.data, m.headers) for m in got] == [
            (b"one", {"Nats-Msg-Id": "a"}),
            (b"two", None),
        ]
    finally:
        await nc.close()
