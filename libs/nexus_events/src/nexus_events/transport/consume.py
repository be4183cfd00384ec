"""Durable consumption on JetStream: batches of decoded deliveries to a handler.

`Consumer` hands decoded batches to a handler, acks what the handler accepted, naks with
backoff what failed, and copies poison messages (undecodable, invalid, unknown, or failed
``max_deliver`` times) to NEXUS_DLQ with the reason before terminating them. One failing
message fails alone: a batch whose handler raises is handed over again one delivery at a time.
Made by `Bus.consumer`; `nexus_events.transport.bus` re-exports these names.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import nats
import nats.errors
import nats.js.errors
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

from nexus_events.contract import codec, subjects
from nexus_events.contract.codec import Decoded, JsMeta
from nexus_events.errors import BusError, DecodeError
from nexus_events.events.base import Event
from nexus_events.runtime import telemetry

if TYPE_CHECKING:
    from nexus_events.transport.bus import Bus

log = logging.getLogger(__name__)

# Errors of a fetch that mean "the connection (or consumer) is away": wait and fetch again.
FETCH_AWAY_ERRORS = (
    nats.errors.ConnectionClosedError,
    nats.errors.ConnectionReconnectingError,
    nats.errors.StaleConnectionError,
    nats.errors.NoRespondersError,
    nats.js.errors.ServiceUnavailableError,
    nats.js.errors.NotFoundError,
)


def decode_msg(msg: Msg) -> Decoded:
    """Decode a JetStream message (headers and delivery metadata included)."""
    return codec.decode(msg.subject, msg.data, msg.headers, JsMeta.from_reply(msg.reply))


@dataclass(slots=True)
class Delivery:
    """One decoded message handed to a handler. The handler may settle it itself with
    `retry` or `reject`; otherwise the consumer acks it when the handler returns."""

    decoded: Decoded
    msg: Msg
    outcome: tuple[str, Any] | None = field(default=None, repr=False)

    @property
    def event(self) -> Event:
        return self.decoded.event

    @property
    def envelope(self) -> codec.Envelope:
        return self.decoded.envelope

    @property
    def address(self) -> subjects.ParsedSubject:
        return self.decoded.address

    @property
    def num_delivered(self) -> int:
        return self.decoded.envelope.num_delivered

    def retry(self, delay: float | None = None) -> None:
        """Redeliver this message later (after `delay`, else the consumer's backoff)."""
        self.outcome = ("retry", delay)

    def reject(self, reason: str, error: str) -> None:
        """Give up on this message: dead-letter it with `reason` and terminate it."""
        self.outcome = ("reject", (reason, error))


BatchHandler = Callable[[list[Delivery]], Awaitable[None]]


@dataclass(frozen=True)
class ConsumerSpec:
    """A durable pull consumer and how its messages are retried."""

    stream: str
    durable: str
    filter_subjects: tuple[str, ...] = ()
    batch: int = 100
    max_deliver: int = 5
    # Delay before the n-th redelivery after a failure (the last value repeats).
    backoff: tuple[float, ...] = (1.0, 5.0, 30.0)
    ack_wait: float = 30.0
    max_ack_pending: int = 1000
    fetch_timeout: float = 1.0
    # Where a NEW durable starts: None = the first message; n = stream sequence n (e.g. the
    # end of a replay the service already did). An existing durable keeps its position.
    start_seq: int | None = None

    def config(self) -> ConsumerConfig:
        filters = list(self.filter_subjects)
        start = self.start_seq if self.start_seq is not None and self.start_seq > 1 else None
        return ConsumerConfig(
            name=self.durable,
            durable_name=self.durable,
            deliver_policy=DeliverPolicy.BY_START_SEQUENCE if start else DeliverPolicy.ALL,
            opt_start_seq=start,
            ack_policy=AckPolicy.EXPLICIT,
            ack_wait=self.ack_wait,
            max_deliver=self.max_deliver,
            max_ack_pending=self.max_ack_pending,
            filter_subject=filters[0] if len(filters) == 1 else None,
            filter_subjects=filters if len(filters) > 1 else None,
        )

    def delay_for(self, num_delivered: int) -> float:
        return self.backoff[min(max(num_delivered, 1), len(self.backoff)) - 1]


async def ensure_durable(js: JetStreamContext, spec: ConsumerSpec) -> None:
    """Create the durable of `spec`, or update it keeping the start position it was made with
    (the start of a durable cannot change). FastStream's pull_subscribe would only bind to an
    existing one and silently ignore a changed config, so `nexus_events.transport.fast` calls this
    too."""
    config = spec.config()
    try:
        existing = await js.consumer_info(spec.stream, spec.durable)
    except nats.js.errors.NotFoundError:
        existing = None
    if existing is not None:
        config.deliver_policy = existing.config.deliver_policy
        config.opt_start_seq = existing.config.opt_start_seq
    try:
        await js.add_consumer(spec.stream, config)
    except nats.js.errors.APIError as exc:
        raise BusError(f"cannot create consumer {spec.durable}: {exc}") from exc


@dataclass(frozen=True, slots=True)
class GiveUp:
    """A delivery to dead-letter (with `reason` and `error`) and terminate."""

    reason: str
    error: str


def after_failure(
    spec: ConsumerSpec, delivered: int, delay: float | None, error: str
) -> float | GiveUp:
    """What a delivery that failed (`error`) on its `delivered`-th attempt gets: a redelivery
    after the returned seconds (`delay` if given, else the spec's backoff) or, from its
    ``max_deliver``-th delivery on, `GiveUp` (reason ``max_deliver``, the last error).
    The one retry policy of the bus `Consumer` and the FastStream handlers."""
    if delivered >= spec.max_deliver:
        return GiveUp("max_deliver", f"failed {delivered} deliveries; last: {error}")
    return delay if delay is not None else spec.delay_for(delivered)


async def keep_alive(msgs: Sequence[Msg], ack_wait: float) -> None:
    """Tell the server every third of `ack_wait` that `msgs` are still being handled (until
    cancelled): a handler outliving ack_wait would otherwise see its message redelivered
    while it still runs. FastStream never sends ``in_progress`` itself."""
    while True:
        await asyncio.sleep(ack_wait / 3)
        for msg in msgs:
            with contextlib.suppress(nats.errors.Error):
                await msg.in_progress()


class Consumer:
    """A durable pull consumer loop: fetch a batch, decode, hand over, settle each message."""

    def __init__(self, bus: Bus, spec: ConsumerSpec, handler: BatchHandler) -> None:
        self.bus = bus
        self.spec = spec
        self.handler = handler
        self._stopping = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._advisories: Any = None
        self.processed = 0
        self.dead_lettered = 0

    async def start(self) -> None:
        """Create or update the durable consumer and start the fetch loop in a task."""
        await ensure_durable(self.bus.js, self.spec)
        # A message whose last delivery timed out (handler hung, process died) is never
        # redelivered; the server's advisory lets us dead-letter it anyway.
        self._advisories = await self.bus.nc.subscribe(
            f"$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.{self.spec.stream}.{self.spec.durable}",
            cb=self._on_max_deliveries,
        )
        self._task = asyncio.create_task(self._run(), name=f"consumer:{self.spec.durable}")

    async def stop(self) -> None:
        """Drain: finish the batch in hand, settle it, then stop fetching."""
        self._stopping.set()
        if self._task is not None:
            await self._task
            self._task = None
        if self._advisories is not None:
            with contextlib.suppress(nats.errors.Error):
                await self._advisories.unsubscribe()
            self._advisories = None

    async def __aenter__(self) -> Consumer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def _run(self) -> None:
        sub = await self.bus.js.pull_subscribe_bind(self.spec.durable, stream=self.spec.stream)
        # The last fetch error logged: a leader election fails fetches for seconds, said once
        # (again only if the error changes or after a fetch delivered something).
        reported: str | None = None
        try:
            while not self._stopping.is_set():
                try:
                    msgs = await sub.fetch(self.spec.batch, timeout=self.spec.fetch_timeout)
                except (TimeoutError, nats.errors.TimeoutError):
                    continue
                except FETCH_AWAY_ERRORS as exc:
                    error = f"{type(exc).__name__}: {exc}"
                    if error != reported:
                        reported = error
                        log.warning("fetch on %s failed, retrying: %s", self.spec.durable, error)
                    await self._pause(0.5)
                    continue
                if reported is not None:
                    log.info("fetch on %s works again", self.spec.durable)
                    reported = None
                try:
                    await self._process(msgs)
                except (nats.errors.Error, nats.js.errors.Error, BusError) as exc:
                    # Acks/naks/DLQ publishes failed (connection away): unsettled messages
                    # come back after ack_wait, so carry on.
                    log.warning("settling on %s failed: %s", self.spec.durable, exc)
                    await self._pause(0.5)
        finally:
            with contextlib.suppress(nats.errors.Error):
                await sub.unsubscribe()

    async def _pause(self, seconds: float) -> None:
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self._stopping.wait(), timeout=seconds)

    async def _process(self, msgs: list[Msg]) -> None:
        deliveries: list[Delivery] = []
        for msg in msgs:
            try:
                deliveries.append(Delivery(decode_msg(msg), msg))
            except DecodeError as exc:
                await self._settle_safely(msg, self._give_up(msg, exc.reason, str(exc)))
        if not deliveries:
            return
        keepalive = asyncio.create_task(keep_alive([d.msg for d in deliveries], self.spec.ack_wait))
        try:
            failures = await self._hand_over(deliveries)
        finally:
            keepalive.cancel()
        for d in deliveries:
            error = failures.get(id(d))
            if error is not None:
                settle = self._retry(d, None, error)
            elif d.outcome is None:
                settle = d.msg.ack()
            else:
                settle = self._settle(d)
            await self._settle_safely(d.msg, settle)
        self.processed += len(deliveries)

    async def _hand_over(self, deliveries: list[Delivery]) -> dict[int, str]:
        """Give the batch to the handler; if it fails, give each delivery alone, so one bad
        message fails alone and its neighbours are not retried (or dead-lettered) with it.
        Returns the error of each delivery that failed by itself, keyed by `id()`."""
        try:
            await self._call(deliveries)
        except Exception as exc:  # the handler is user code: any failure is a retry
            error = f"{type(exc).__name__}: {exc}"
            if len(deliveries) == 1:
                log.exception("handler of %s failed", self.spec.durable)
                return {id(deliveries[0]): error}
            log.warning(
                "handler of %s failed on a batch of %d (%s); handling each message alone",
                self.spec.durable,
                len(deliveries),
                error,
            )
        else:
            return {}
        failures: dict[int, str] = {}
        for d in deliveries:
            d.outcome = None  # whatever the failed batch call decided is void
            try:
                await self._call([d])
            except Exception as exc:
                log.exception("handler of %s failed on %s", self.spec.durable, d.msg.subject)
                failures[id(d)] = f"{type(exc).__name__}: {exc}"
        return failures

    async def _call(self, deliveries: list[Delivery]) -> None:
        with telemetry.consumer_span(
            f"consume {self.spec.durable}",
            deliveries[0].msg.headers,
            {"messaging.batch.message_count": len(deliveries)},
        ):
            await self.handler(deliveries)

    async def _settle_safely(self, msg: Msg, settle: Awaitable[None]) -> None:
        # One message's ack/nak/dead letter failing (connection away) must not leave the
        # others unsettled: each is settled on its own; an unsettled one comes back after
        # ack_wait.
        try:
            await settle
        except (nats.errors.Error, nats.js.errors.Error, BusError) as exc:
            log.warning(
                "settling %s on %s failed, it will be redelivered: %s",
                msg.subject,
                self.spec.durable,
                exc,
            )

    async def _settle(self, d: Delivery) -> None:
        assert d.outcome is not None
        if d.outcome[0] == "retry":
            await self._retry(d, d.outcome[1], "handler asked for a retry")
        else:
            reason, error = d.outcome[1]
            await self._give_up(d.msg, reason, error)

    async def _retry(self, d: Delivery, delay: float | None, error: str) -> None:
        step = after_failure(self.spec, d.num_delivered, delay, error)
        if isinstance(step, GiveUp):
            await self._give_up(d.msg, step.reason, step.error)
        else:
            await d.msg.nak(delay=step)

    async def _give_up(self, msg: Msg, reason: str, error: str) -> None:
        # Terminated even when the DLQ refused the letter (logged with the original's
        # position by the bus): a message that cannot be dead-lettered must not stop anything.
        if await self.bus.dead_letter(msg, reason=reason, error=error, consumer=self.spec.durable):
            self.dead_lettered += 1
        await msg.term()

    async def _on_max_deliveries(self, advisory: Msg) -> None:
        try:
            info = codec.parse_body(advisory.subject, advisory.data)
            await self.bus.dead_letter_unacknowledged(self.spec.stream, self.spec.durable, info)
            self.dead_lettered += 1
        except Exception:  # an advisory callback must never kill the subscription
            log.exception("could not dead-letter after a max-deliveries advisory")


__all__ = [
    "FETCH_AWAY_ERRORS",
    "BatchHandler",
    "Consumer",
    "ConsumerSpec",
    "Delivery",
    "GiveUp",
    "after_failure",
    "decode_msg",
    "keep_alive",
]
