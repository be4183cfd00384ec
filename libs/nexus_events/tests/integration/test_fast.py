"""FastStream handlers (`nexus_events.transport.fast`) keep the delivery guarantees of `Consumer`.

Against a real nats-server: undecodable messages and handler rejections are dead-lettered with
their reason, a failing handler is retried then dead-lettered after max_deliver, one bad
message fails alone among good ones, the handler's span continues the publisher's trace, and
a restarted service resumes its durable without handling acked messages again.
"""

from __future__ import annotations

import logging
import subprocess
import time
import uuid
from collections import Counter
from collections.abc import Iterator

import pytest
from nexus_events.contract import subjects
from nexus_events.contract.streams import RUNS, ensure_streams
from nexus_events.events import RunHeartbeat
from nexus_events.events.base import Event
from nexus_events.runtime import telemetry
from nexus_events.transport.bus import Bus, BusSettings, ConsumerSpec
from nexus_events.transport.fast import Delivered, Handlers, Reject, Retry, ensure_durable
from nexus_testing import dead_letters, eventually, free_port, nats_server_binary
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind


def spec(**overrides) -> ConsumerSpec:
    values = {
        "stream": RUNS,
        "durable": f"f-{uuid.uuid4().hex[:10]}",
        "fetch_timeout": 0.3,
        "backoff": (0.1,),
    }
    values.update(overrides)
    return ConsumerSpec(**values)


async def _settled(bus: Bus, s: ConsumerSpec):
    info = await bus.js.consumer_info(s.stream, s.durable)
    return info if (info.num_ack_pending or 0) == 0 and (info.num_pending or 0) == 0 else None


async def _beat(bus: Bus, run: str, seq: int):
    return await bus.publish(subjects.run_event(run, "heartbeat"), RunHeartbeat(seq=seq))


async def test_undecodable_and_rejected_messages_are_dead_lettered_with_their_reason(bus: Bus):
    subject = subjects.run_event("run_bad", "heartbeat")
    garbage = await bus.js.publish(subject, b"{not json")
    invalid = await bus.js.publish(subject, b'{"seq": -1}')
    refused = await _beat(bus, "run_bad", 7)
    good = await _beat(bus, "run_bad", 8)
    seen: list[int] = []
    s = spec()
    handlers = Handlers(bus)

    @handlers.durable(s)
    async def handle(event: Event, delivered: Delivered) -> None:
        assert isinstance(event, RunHeartbeat)
        if event.seq == 7:
            raise Reject("not_for_us", "seq 7 is refused")
        seen.append(delivered.envelope.stream_seq)

    await handlers.start()
    try:
        letters = await eventually(
            lambda: _letters_when(bus, 3), what="three dead letters", within=20
        )
        await eventually(lambda: _settled(bus, s), what="every message settled", within=20)
    finally:
        await handlers.stop()
    by_seq = {letter.stream_seq: letter for letter in letters}
    assert set(by_seq) == {garbage.seq, invalid.seq, refused.seq}
    assert by_seq[garbage.seq].reason == "undecodable"
    assert by_seq[invalid.seq].reason == "invalid_event"
    assert by_seq[refused.seq].reason == "not_for_us"
    assert by_seq[refused.seq].error == "seq 7 is refused"
    assert all(letter.consumer == s.durable for letter in letters)
    assert seen == [good.seq]
    assert handlers.durables[0].dead_lettered == 3


async def _letters_when(bus: Bus, n: int):
    letters = await dead_letters(bus)
    return letters if len(letters) >= n else None


async def test_a_failing_handler_is_retried_then_dead_lettered_after_max_deliver(bus: Bus):
    ack = await _beat(bus, "run_fail", 1)
    attempts: list[int] = []
    s = spec(max_deliver=3)
    handlers = Handlers(bus)

    @handlers.durable(s)
    async def handle(event: Event, delivered: Delivered) -> None:
        attempts.append(delivered.envelope.num_delivered)
        raise RuntimeError("the handler is broken")

    await handlers.start()
    try:
        [letter] = await eventually(lambda: dead_letters(bus), what="a dead letter", within=20)
        await eventually(lambda: _settled(bus, s), what="the message terminated", within=20)
    finally:
        await handlers.stop()
    assert attempts == [1, 2, 3]
    assert letter.reason == "max_deliver"
    assert letter.stream_seq == ack.seq
    assert "failed 3 deliveries" in letter.error
    assert "RuntimeError: the handler is broken" in letter.error


async def test_retry_redelivers_and_the_second_delivery_succeeds(bus: Bus):
    await _beat(bus, "run_retry", 1)
    attempts: list[int] = []
    s = spec()
    handlers = Handlers(bus)

    @handlers.durable(s)
    async def handle(event: Event, delivered: Delivered) -> None:
        attempts.append(delivered.envelope.num_delivered)
        if delivered.envelope.num_delivered == 1:
            raise Retry(0.05)

    await handlers.start()
    try:
        await eventually(lambda: _settled(bus, s), what="the message acked", within=20)
    finally:
        await handlers.stop()
    assert attempts == [1, 2]
    assert await dead_letters(bus) == []


async def test_a_bad_message_fails_alone_among_good_ones(bus: Bus):
    acks = [await _beat(bus, "run_iso", i) for i in range(6)]
    handled: Counter[int] = Counter()
    s = spec(batch=6, max_deliver=3)
    handlers = Handlers(bus)

    @handlers.durable(s)
    async def handle(event: Event) -> None:
        assert isinstance(event, RunHeartbeat)
        if event.seq == 3:
            raise RuntimeError("seq 3 is poison for this handler")
        handled[event.seq] += 1

    await handlers.start()
    try:
        [letter] = await eventually(lambda: dead_letters(bus), what="a dead letter", within=20)
        await eventually(lambda: _settled(bus, s), what="every message settled", within=20)
    finally:
        await handlers.stop()
    # Each good neighbour handled exactly once: the bad one's retries did not drag them along.
    assert handled == {0: 1, 1: 1, 2: 1, 4: 1, 5: 1}
    assert letter.stream_seq == acks[3].seq
    assert letter.reason == "max_deliver"


@pytest.fixture
def exporter(monkeypatch):
    monkeypatch.setattr(telemetry, "_installed", {})
    spans = InMemorySpanExporter()
    provider = telemetry.setup_telemetry("fast-test", exporter=spans, env={})
    assert provider is not None
    yield spans
    provider.shutdown()


async def test_the_handler_span_continues_the_publishers_trace(bus: Bus, exporter):
    provider = telemetry._installed["provider"]
    with provider.get_tracer("publisher").start_as_current_span("publish") as parent:
        await _beat(bus, "run_trace", 1)
    await _beat(bus, "run_trace", 2)
    publisher = parent.get_span_context()
    inside: dict[int, int] = {}
    s = spec(batch=1)
    handlers = Handlers(bus)

    @handlers.durable(s, ordered=True)
    async def handle(event: Event) -> None:
        assert isinstance(event, RunHeartbeat)
        # The handler runs inside the consumer span: what it publishes joins the trace.
        inside[event.seq] = telemetry.tracer().start_span("x").get_span_context().trace_id

    await handlers.start()
    try:
        consumed = await eventually(
            lambda: (
                [sp for sp in exporter.get_finished_spans() if sp.kind is SpanKind.CONSUMER]
                if len(inside) == 2
                else None
            ),
            what="two consumer spans",
            within=20,
        )
    finally:
        await handlers.stop()
    first, second = sorted(consumed, key=lambda sp: sp.start_time)[:2]
    assert first.name == f"consume {s.durable}"
    assert first.context.trace_id == publisher.trace_id
    assert first.parent is not None
    assert first.parent.span_id == publisher.span_id
    assert inside[1] == publisher.trace_id
    assert second.context.trace_id != publisher.trace_id
    assert second.parent is None


async def test_a_restarted_service_resumes_its_durable_without_reprocessing(bus: Bus):
    s = spec()
    seen: list[int] = []

    def make() -> Handlers:
        handlers = Handlers(bus)

        @handlers.durable(s, ordered=True)
        async def handle(event: Event) -> None:
            assert isinstance(event, RunHeartbeat)
            seen.append(event.seq)

        return handlers

    for i in range(3):
        await _beat(bus, "run_resume", i)
    first = make()
    await first.start()
    try:
        await eventually(lambda: _settled(bus, s), what="the first three acked", within=20)
    finally:
        await first.stop()
    for i in range(3, 5):
        await _beat(bus, "run_resume", i)
    second = make()
    await second.start()
    try:
        await eventually(lambda: len(seen) >= 5, what="the two new ones handled", within=20)
        await eventually(lambda: _settled(bus, s), what="all acked", within=20)
    finally:
        await second.stop()
    # In order (ordered=True) and the first three not again.
    assert seen == [0, 1, 2, 3, 4]


async def test_stop_returns_promptly_while_fetching_an_empty_stream(bus: Bus):
    s = spec(fetch_timeout=1.0)
    handlers = Handlers(bus, graceful_timeout=5.0)

    @handlers.durable(s)
    async def handle(event: Event) -> None:
        return None

    await handlers.start()
    assert handlers.connected
    started = time.monotonic()
    await handlers.stop()
    # Drain must not wait out nats-py's drain_timeout behind a pending fetch.
    assert time.monotonic() - started < 5.0
    assert not handlers.connected


async def test_stop_returns_when_nats_is_gone(nats_server, bus: Bus):
    s = spec()
    handlers = Handlers(bus, graceful_timeout=2.0)

    @handlers.durable(s)
    async def handle(event: Event) -> None:
        return None

    await handlers.start()
    nats_server.stop()
    await eventually(lambda: not handlers.connected, what="the broker noticed", within=20)
    started = time.monotonic()
    await handlers.stop()
    assert time.monotonic() - started < 10.0


async def test_a_last_delivery_that_timed_out_is_dead_lettered_from_the_advisory(bus: Bus):
    """A process that died holding the message's last delivery: nothing redelivers it; the
    server's MAX_DELIVERIES advisory makes the handlers dead-letter it."""
    ack = await _beat(bus, "run_hung", 1)
    s = spec(max_deliver=1, ack_wait=0.5)
    await ensure_durable(bus.js, s)
    # The dead process: takes the only delivery and never settles it.
    sub = await bus.js.pull_subscribe_bind(s.durable, stream=s.stream)
    [taken] = await sub.fetch(1, timeout=5)
    assert taken.metadata.sequence.stream == ack.seq
    await sub.unsubscribe()
    handled: list[int] = []
    handlers = Handlers(bus)

    @handlers.durable(s)
    async def handle(event: Event) -> None:
        assert isinstance(event, RunHeartbeat)
        handled.append(event.seq)

    await handlers.start()
    try:
        [letter] = await eventually(lambda: dead_letters(bus), what="a dead letter", within=20)
    finally:
        await handlers.stop()
    assert letter.reason == "max_deliver"
    assert letter.stream_seq == ack.seq
    assert letter.consumer == s.durable
    assert "not acknowledged after 1 deliveries" in letter.error
    assert handled == []
    assert handlers.durables[0].dead_lettered == 1


@pytest.fixture(params=["user", "token"])
def secured_nats(tmp_path, request) -> Iterator[BusSettings]:
    """A nats-server that wants a user and password, or a token; the settings that log in."""
    if request.param == "user":
        auth, login = (
            'authorization { users = [{user: "svc", password: "pw"}] }',
            {
                "user": "svc",
                "password": "pw",
            },
        )
    else:
        auth, login = 'authorization { token: "tok" }', {"token": "tok"}
    conf = tmp_path / "nats.conf"
    conf.write_text(f'jetstream {{ store_dir: "{tmp_path / "js"}" }}\n{auth}\n')
    port = free_port()
    proc = subprocess.Popen(
        [nats_server_binary(), "-c", str(conf), "-a", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        yield BusSettings(url=f"nats://127.0.0.1:{port}", connect_attempts=40, **login)
    finally:
        proc.kill()
        proc.wait(10)


async def test_the_broker_connects_with_the_bus_settings_credentials(
    secured_nats: BusSettings,
) -> None:
    """Every deployment gives each service a NATS user (deploy/nats): FastStream takes
    credentials as a `security` object, so `BusSettings` must be translated, not passed on."""
    bus = await Bus.connect(secured_nats, source="svc")
    await ensure_streams(bus.js)
    handlers = Handlers(bus, secured_nats)
    seen: list[int] = []

    @handlers.durable(spec())
    async def handle(event: Event) -> None:
        assert isinstance(event, RunHeartbeat)
        seen.append(event.seq)

    await handlers.start()
    try:
        await _beat(bus, "run_auth", 5)
        await eventually(lambda: seen == [5], what="the heartbeat handled")
    finally:
        await handlers.stop()
        await bus.close()


async def _count_pull_requests(bus: Bus, s: ConsumerSpec) -> list[int]:
    """A live count of the pull requests sent to `s`'s durable (each fetch sends one or two):
    a plain subscriber on the request subject sees them beside the server."""
    seen = [0]

    async def count(_msg: object) -> None:
        seen[0] += 1

    await bus.nc.subscribe(f"$JS.API.CONSUMER.MSG.NEXT.{s.stream}.{s.durable}", cb=count)
    return seen


async def test_an_idle_fetch_that_times_out_logs_nothing(bus: Bus, caplog):
    # A fetch timeout this short makes nats-py 2.16 raise its plain asyncio.TimeoutError (the
    # deadline runs out between the no-wait probe and the lingering request) again and again;
    # under load the same happens with ordinary timeouts.
    s = spec(fetch_timeout=0.002)
    caplog.set_level(logging.WARNING)  # whatever an earlier test left on the root logger
    seen: list[int] = []
    handlers = Handlers(bus)

    @handlers.durable(s)
    async def handle(event: Event) -> None:
        assert isinstance(event, RunHeartbeat)
        seen.append(event.seq)

    requests = await _count_pull_requests(bus, s)
    await handlers.start()
    try:
        await eventually(lambda: requests[0] >= 300, what="300 idle pull requests", within=30)
        await _beat(bus, "run_idle", 1)
        await eventually(lambda: seen == [1], what="the message after the idle time")
        # Before stopping: closing the connection logs its own (expected) warning.
        noisy = [
            r
            for r in caplog.records
            if r.levelno >= logging.WARNING and r.name.startswith(("nexus_events", "faststream"))
        ]
    finally:
        await handlers.stop()
    assert noisy == [], [f"{r.name}: {r.getMessage()[:120]}" for r in noisy]
