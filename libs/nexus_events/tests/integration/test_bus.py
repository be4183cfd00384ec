"""The bus against a real nats-server: dedupe, envelopes, dead letters, retries, replay,
restarts and draining (the acceptance criteria of the contract library)."""

from __future__ import annotations

import asyncio
import base64
import itertools
import socket
import time
import uuid

import pytest
from nexus_events.contract import subjects
from nexus_events.contract.codec import Encoded
from nexus_events.contract.streams import DLQ, RUNS
from nexus_events.errors import BusError, BusUnavailable, InvalidSubject, PublishFailed
from nexus_events.events import DeadLetter, RunHeartbeat, RunRequested, RunTurn
from nexus_events.transport.bus import Bus, BusSettings, ConsumerSpec, Delivery, Outgoing
from nexus_testing import NatsServer, dead_letters, eventually


class Recorder:
    """A batch handler that keeps every delivery it was given."""

    def __init__(self) -> None:
        self.deliveries: list[Delivery] = []

    async def __call__(self, batch: list[Delivery]) -> None:
        self.deliveries.extend(batch)


def spec(**overrides) -> ConsumerSpec:
    values = {"stream": RUNS, "durable": f"t-{uuid.uuid4().hex[:10]}", "fetch_timeout": 0.5}
    values.update(overrides)
    return ConsumerSpec(**values)


async def stored(bus: Bus, stream: str) -> int:
    return (await bus.js.stream_info(stream)).state.messages


async def settled(bus: Bus, s: ConsumerSpec) -> bool:
    info = await bus.js.consumer_info(s.stream, s.durable)
    return (info.num_ack_pending or 0) == 0


async def test_same_msg_id_twice_is_stored_once(bus: Bus):
    subject = subjects.run_event("run_d", "heartbeat")
    first = await bus.publish(subject, RunHeartbeat(seq=1), msg_id="hb-1")
    again = await bus.publish(subject, RunHeartbeat(seq=1), msg_id="hb-1")
    assert not first.duplicate
    assert again.duplicate is True
    assert again.seq == first.seq
    assert await stored(bus, RUNS) == 1

    # Without an explicit id the content id makes a repeated publish a duplicate too.
    third = await bus.publish(subject, RunHeartbeat(seq=2))
    fourth = await bus.publish(subject, RunHeartbeat(seq=2))
    assert not third.duplicate
    assert fourth.duplicate is True
    assert await stored(bus, RUNS) == 2


async def test_raw_json_without_headers_is_decoded_with_defaults(bus: Bus):
    subject = subjects.run_event("run_raw", "requested")
    await bus.nc.publish(subject, b'{"agent_id": "planner", "input": "typed by hand"}')
    await bus.nc.flush()
    rec = Recorder()
    async with bus.consumer(spec(), rec):
        await eventually(lambda: rec.deliveries, what="delivery of the hand-typed request")
    [d] = rec.deliveries
    assert not d.msg.headers
    assert d.event == RunRequested(agent_id="planner", input="typed by hand")
    assert d.decoded.address.run_id == "run_raw"
    env = d.envelope
    assert env.stream == RUNS
    assert env.stream_seq == 1
    assert env.event_id == f"{RUNS}:1"
    assert env.schema == "nexus.agent.run.requested/1"
    assert env.source == "external"
    assert env.timestamp is not None
    assert env.num_delivered == 1


async def test_poison_messages_go_to_the_dlq_and_good_ones_are_handled(bus: Bus):
    run = "run_poison"
    good_seqs = []
    bad: dict[int, tuple[str, str, bytes]] = {}  # seq -> (reason, subject, body)

    async def good(i: int) -> None:
        ack = await bus.publish(subjects.run_event(run, "heartbeat"), RunHeartbeat(seq=i))
        good_seqs.append(ack.seq)

    async def raw(reason: str, subject: str, body: bytes) -> None:
        ack = await bus.js.publish(subject, body)
        bad[ack.seq] = (reason, subject, body)

    await good(0)
    await raw("undecodable", subjects.run_event(run, "heartbeat"), b"\xff\x00 not json")
    await good(1)
    await raw("invalid_event", subjects.run_event(run, "requested"), b'{"input": "no agent"}')
    await good(2)
    await raw("unknown_event", subjects.run_event(run, "exploded"), b'{"boom": true}')
    await good(3)

    rec = Recorder()
    s = spec(batch=3)  # poison and good messages share batches
    async with bus.consumer(s, rec) as consumer:
        await eventually(lambda: len(rec.deliveries) == 4, what="4 good deliveries")
        await eventually(lambda: stored(bus, DLQ), what="dead letters")
        await eventually(lambda: settled(bus, s), what="every message settled")
        await eventually(lambda: consumer.dead_lettered == 3)

    assert [d.envelope.stream_seq for d in rec.deliveries] == good_seqs
    assert [d.event.seq for d in rec.deliveries] == [0, 1, 2, 3]
    assert consumer.processed == 4

    letters = await eventually(lambda: _letters_if(bus, 3), what="three dead letters in NEXUS_DLQ")
    by_seq = {letter.stream_seq: letter for letter in letters}
    assert set(by_seq) == set(bad)
    for seq, (reason, subject, body) in bad.items():
        letter = by_seq[seq]
        assert letter.reason == reason
        assert letter.subject == subject
        assert letter.stream == RUNS
        assert letter.consumer == s.durable
        assert letter.service == "test"
        assert letter.num_delivered == 1
        if letter.body_encoding == "base64":
            assert base64.b64decode(letter.body) == body
        else:
            assert letter.body.encode() == body
    undecodable = next(v for v in by_seq.values() if v.reason == "undecodable")
    assert undecodable.body_encoding == "base64"
    invalid = next(v for v in by_seq.values() if v.reason == "invalid_event")
    assert "agent_id" in invalid.error


async def _letters_if(bus: Bus, n: int) -> list[DeadLetter] | None:
    letters = await dead_letters(bus)
    assert len(letters) <= n, letters
    return letters if len(letters) == n else None


async def test_failing_handler_is_retried_with_backoff_then_dead_lettered(bus: Bus):
    calls: list[tuple[int, float]] = []

    async def failing(batch: list[Delivery]) -> None:
        for d in batch:
            calls.append((d.num_delivered, time.monotonic()))
        raise RuntimeError("handler exploded")

    ack = await bus.publish(subjects.run_event("run_f", "heartbeat"), RunHeartbeat(seq=1))
    s = spec(backoff=(0.2, 0.2), max_deliver=3)
    async with bus.consumer(s, failing):
        [letter] = await eventually(lambda: _letters_if(bus, 1), what="a max_deliver letter")
        await eventually(lambda: settled(bus, s), what="the message terminated")

    assert [n for n, _ in calls] == [1, 2, 3]
    gaps = [b - a for (_, a), (_, b) in itertools.pairwise(calls)]
    assert all(gap >= 0.2 for gap in gaps), gaps
    assert letter.reason == "max_deliver"
    assert letter.num_delivered == 3
    assert letter.stream_seq == ack.seq
    assert "handler exploded" in letter.error


async def test_reject_dead_letters_the_message(bus: Bus):
    acks = [
        await bus.publish(subjects.run_event("run_r", "heartbeat"), RunHeartbeat(seq=i))
        for i in range(3)
    ]
    rec = Recorder()

    async def handler(batch: list[Delivery]) -> None:
        await rec(batch)
        for d in batch:
            if d.event.seq == 1:
                d.reject("not_allowed", "seq 1 is forbidden here")

    s = spec()
    async with bus.consumer(s, handler) as consumer:
        [letter] = await eventually(lambda: _letters_if(bus, 1), what="the rejected letter")
        await eventually(lambda: settled(bus, s), what="every message settled")
    assert letter.reason == "not_allowed"
    assert letter.error == "seq 1 is forbidden here"
    assert letter.stream_seq == acks[1].seq
    assert [d.event.seq for d in rec.deliveries] == [0, 1, 2]  # delivered once each
    assert consumer.dead_lettered == 1
    info = await bus.js.consumer_info(s.stream, s.durable)
    assert not info.num_redelivered


async def test_publish_many_returns_acks_in_order_and_stores_all(bus: Bus):
    items = [
        Outgoing(subjects.run_event(f"run_{i % 3}", "heartbeat"), RunHeartbeat(seq=i))
        if i % 4
        else Outgoing(subjects.run_event(f"run_{i % 3}", "turn"), RunTurn(turn=i + 1))
        for i in range(50)
    ]
    acks = await bus.publish_many(items, window=8)
    assert len(acks) == 50
    assert all(a.stream == RUNS and not a.duplicate for a in acks)
    assert sorted(a.seq for a in acks) == list(range(1, 51))
    assert await stored(bus, RUNS) == 50
    for item, ack in zip(items, acks, strict=True):  # ack i belongs to item i
        raw = await bus.js.get_msg(RUNS, ack.seq)
        assert raw.subject == item.subject
        assert type(item.event).model_validate_json(raw.data) == item.event


async def test_publish_many_checks_every_subject_and_event_type_pair(bus: Bus):
    # The batch checks each (subject, event type) pair once: a later mismatch on a subject
    # already seen with the right type must still be refused, before anything is sent.
    subject = subjects.run_event("run_x", "heartbeat")
    items = [Outgoing(subject, RunHeartbeat(seq=i)) for i in range(5)]
    items.append(Outgoing(subject, RunTurn(turn=1)))
    with pytest.raises(InvalidSubject):
        await bus.publish_many(items)
    assert await stored(bus, RUNS) == 0


async def test_replay_from_a_sequence_filtered_to_one_run(bus: Bus):
    runs = ["run_a", "run_b", "run_bb", "run_c"]  # run_bb: a prefix must not match
    items = []
    for i in range(40):
        run = runs[i % 4]
        if i % 3:
            items.append(Outgoing(subjects.run_event(run, "heartbeat"), RunHeartbeat(seq=i)))
        else:
            items.append(Outgoing(subjects.run_event(run, "turn"), RunTurn(turn=i + 1)))
    acks = await bus.publish_many(items)
    start = acks[13].seq
    want = [
        (ack.seq, item.event)
        for item, ack in zip(items, acks, strict=True)
        if ack.seq >= start and subjects.parse_subject(item.subject).run_id == "run_b"
    ]
    assert len(want) == 7

    got = [d async for d in bus.replay(RUNS, start_seq=start, run_id="run_b")]
    assert [(d.envelope.stream_seq, d.event) for d in got] == want
    assert {d.address.run_id for d in got} == {"run_b"}

    whole = [d async for d in bus.replay(RUNS, run_id="run_b")]
    assert len(whole) == 10
    assert [d.envelope.stream_seq for d in whole] == sorted(d.envelope.stream_seq for d in whole)
    assert len([m async for m in bus.replay_raw(RUNS, start_seq=start)]) == 40 - 13


async def test_replay_last_per_subject_reads_the_newest_of_each_subject(bus: Bus):
    items = [
        Outgoing(subjects.run_event(run, "heartbeat"), RunHeartbeat(seq=i))
        for i in range(30)
        for run in ("lp_a", "lp_b", "lp_c")
    ]
    acks = await bus.publish_many(items)
    last = {
        subjects.parse_subject(item.subject).run_id: ack.seq
        for item, ack in zip(items, acks, strict=True)
    }
    wanted = [subjects.run_event(r, "heartbeat") for r in ("lp_a", "lp_c", "lp_none")]
    got = [m async for m in bus.replay_raw(RUNS, filter_subjects=wanted, last_per_subject=True)]
    assert [(m.subject, m.metadata.sequence.stream) for m in got] == [
        (subjects.run_event("lp_a", "heartbeat"), last["lp_a"]),
        (subjects.run_event("lp_c", "heartbeat"), last["lp_c"]),
    ]


async def test_replay_errors_are_the_bus_s_own_not_nats_py_s(nats_server: NatsServer):
    bus = await Bus.connect(BusSettings(url=nats_server.url), source="replayer")
    with pytest.raises(BusError, match="NO_SUCH_STREAM: no such stream"):
        _ = [m async for m in bus.replay_raw("NO_SUCH_STREAM")]
    await bus.close()
    with pytest.raises(BusUnavailable, match="closed"):
        _ = [m async for m in bus.replay_raw(RUNS)]


async def test_nats_restart_mid_stream_loses_nothing(bus: Bus, nats_server: NatsServer):
    n = 600
    fast = BusSettings(
        url=nats_server.url,
        reconnect_time_wait=0.1,
        ping_interval=1,
        publish_timeout=1,
        publish_deadline=30,
    )
    publisher = await Bus.connect(fast, source="publisher")
    listener = await Bus.connect(fast, source="listener")
    acked: list[str] = []
    seen: set[str] = set()
    first_third = asyncio.Event()
    go_on = asyncio.Event()

    async def publish_all() -> None:
        for i in range(n):
            if i == n // 3:
                first_third.set()
                await go_on.wait()
            event_id = f"restart-{i}"
            await publisher.publish(
                subjects.run_event(f"run_{i % 5}", "heartbeat"),
                RunHeartbeat(seq=i),
                msg_id=event_id,
            )
            acked.append(event_id)

    async def handler(batch: list[Delivery]) -> None:
        seen.update(d.envelope.event_id for d in batch)

    s = spec(ack_wait=2.0, batch=50)
    try:
        async with listener.consumer(s, handler):
            pub_task = asyncio.create_task(publish_all())
            async with asyncio.timeout(15):
                await first_third.wait()
            await eventually(lambda: seen, what="consumption before the restart")
            go_on.set()  # the rest is published while the server restarts
            await asyncio.to_thread(nats_server.restart)
            assert len(acked) < n, "the publisher finished before the restart"
            async with asyncio.timeout(40):
                await pub_task
            await eventually(
                lambda: set(acked) <= seen,
                within=30,
                what="every acknowledged event consumed",
            )
        assert len(acked) == n
        assert publisher.nc.stats["reconnects"] >= 1
        assert listener.nc.stats["reconnects"] >= 1
        assert await stored(publisher, RUNS) == n
        ids = [d.envelope.event_id async for d in publisher.replay(RUNS)]
        assert len(ids) == n
        assert set(ids) == {f"restart-{i}" for i in range(n)}
    finally:
        await publisher.close()
        await listener.close()


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


async def test_connect_to_a_closed_port_raises_bus_unavailable_quickly():
    settings = BusSettings(
        url=f"nats://127.0.0.1:{_closed_port()}",
        connect_attempts=1,
        connect_timeout=0.5,
        reconnect_time_wait=0.1,
    )
    started = time.monotonic()
    with pytest.raises(BusUnavailable, match="cannot connect") as info:
        await Bus.connect(settings, source="nobody")
    assert time.monotonic() - started < 3
    assert isinstance(info.value, ConnectionError)


async def test_stop_drains_the_batch_in_hand(bus: Bus):
    await bus.publish_many(
        Outgoing(subjects.run_event("run_s", "heartbeat"), RunHeartbeat(seq=i)) for i in range(30)
    )
    handled: list[int] = []
    in_handler = asyncio.Event()
    release = asyncio.Event()

    async def slow(batch: list[Delivery]) -> None:
        in_handler.set()
        await release.wait()
        handled.extend(d.event.seq for d in batch)

    s = spec(batch=10)
    consumer = bus.consumer(s, slow)
    await consumer.start()
    async with asyncio.timeout(10):
        await in_handler.wait()
    stopping = asyncio.create_task(consumer.stop())
    release.set()
    started = time.monotonic()
    async with asyncio.timeout(5):
        await stopping
    assert time.monotonic() - started < 3

    assert handled == list(range(10))  # the batch in hand finished, no further fetch
    await bus.nc.flush()
    await eventually(lambda: settled(bus, s), within=2, what="the last batch acked")
    info = await bus.js.consumer_info(s.stream, s.durable)
    assert info.delivered.consumer_seq == 10
    assert info.num_pending == 20
    assert not info.num_redelivered


async def test_new_durable_starts_at_start_seq_and_existing_keeps_its_position(bus: Bus):
    acks = [
        await bus.publish(subjects.run_event("r-start", "heartbeat"), RunHeartbeat(seq=i))
        for i in range(5)
    ]
    seen: list[int] = []

    async def handler(batch: list[Delivery]) -> None:
        seen.extend(d.event.seq for d in batch)  # type: ignore[attr-defined]

    spec = ConsumerSpec(stream=RUNS, durable="from_three", start_seq=acks[3].seq)
    async with bus.consumer(spec, handler):
        await eventually(lambda: seen == [3, 4], what="delivery from seq 3")
    # Restarted with another start_seq: the durable keeps its position, nothing is re-read.
    await bus.publish(subjects.run_event("r-start", "heartbeat"), RunHeartbeat(seq=5))
    moved = ConsumerSpec(stream=RUNS, durable="from_three", start_seq=1)
    async with bus.consumer(moved, handler):
        await eventually(lambda: seen == [3, 4, 5], what="only the new message")


async def test_close_while_reconnecting_does_not_raise(nats_server: NatsServer):
    bus = await Bus.connect(
        BusSettings(url=nats_server.url, reconnect_time_wait=0.2), source="closer"
    )
    await bus.nc.publish("x.y", b"before")
    nats_server.stop(kill=True)
    for _ in range(20):
        await bus.nc.publish("x.y", b"during")  # buffered while reconnecting
        await asyncio.sleep(0.05)
    assert not bus.nc.is_connected
    await asyncio.wait_for(bus.close(), timeout=10)
    assert bus.nc.is_closed


async def test_an_unacked_publish_is_retried_with_its_id_until_the_deadline(
    bus: Bus, nats_url: str
):
    """No stream takes the subject, only a plain subscriber that never answers: each try
    times out, is sent again (same Nats-Msg-Id) after a growing wait, and the call fails
    with PublishFailed once the next wait would pass the deadline."""
    impatient = await Bus.connect(
        BusSettings(url=nats_url, publish_timeout=0.2, publish_deadline=1.0), source="impatient"
    )
    subject = f"nostream.{uuid.uuid4().hex[:8]}"
    tries: list[str] = []

    async def seen(msg) -> None:
        tries.append(msg.headers["Nats-Msg-Id"])

    sub = await bus.nc.subscribe(subject, cb=seen)
    try:
        started = time.monotonic()
        with pytest.raises(PublishFailed, match=rf"no ack for {subject} within 1.0s: TimeoutError"):
            await impatient.publish_encoded(Encoded(subject, b"{}", {"Nats-Msg-Id": "retry-me"}))
        took = time.monotonic() - started
        await eventually(lambda: len(tries) >= 2, what="the retries arrived")
        # 0.2 s per try, waits 0.05, 0.1, 0.2 (then 0.4 would pass the deadline): 4 tries.
        assert 2 <= len(tries) <= 5
        assert set(tries) == {"retry-me"}
        assert 0.6 <= took < 5
    finally:
        await sub.unsubscribe()
        await impatient.close()
