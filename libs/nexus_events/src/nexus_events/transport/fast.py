"""Message handlers on FastStream with the delivery guarantees of `nexus_events.transport.consume`.

`Handlers` owns a FastStream `NatsBroker` built from the service's `BusSettings` (its own
connection, next to the `Bus`) and declares each durable pull consumer of a `ConsumerSpec` as
a FastStream subscriber: the handler is ordinary FastStream handler code that takes the
decoded event as its body, and `Delivered` (the `Decoded`: envelope, address, delivery count)
from the context when it needs more::

    handlers = Handlers(bus)

    @handlers.durable(ConsumerSpec(stream=RUNS, durable="memory_extraction", ...))
    async def on_ending(event: Event, delivered: Delivered) -> None: ...

    await handlers.start()   # creates/updates the durables, starts the broker
    await handlers.stop()    # in-flight handlers finish (graceful timeout), then it closes

Delivery semantics are those of `Consumer` (the same durable, the same config, so a service
moved from `Consumer` resumes its durable where it was):

- a message that does not decode (bad JSON, invalid or unknown event) is dead-lettered with
  the codec's reason through `Bus.dead_letter` and terminated; the handler never sees it;
- a handler that returns acks; one that raises is naked with the spec's backoff, and on its
  ``max_deliver``-th delivery the message is dead-lettered (reason ``max_deliver``, the last
  error) and terminated. `Retry` asks for a redelivery, `Reject` dead-letters with a reason;
- each message is handled and settled alone (FastStream runs the messages of one fetch
  concurrently; ``ordered=True`` fetches one at a time where order matters);
- a delivery whose last attempt timed out is dead-lettered from the server's MAX_DELIVERIES
  advisory; handlers outliving a third of ``ack_wait`` are kept alive with ``in_progress``
  (FastStream itself never sends it);
- the handler runs in a CONSUMER span continuing the trace in the message's headers;
- an idle fetch that times out logs nothing, a failing one a single warning line
  (`nexus_events.transport.quiet_fetch`).

Streams are provisioned by `nexus_events.contract.streams`: subscribers declare ``JStream(..,
declare=False)`` so FastStream never rewrites a stream's config.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Annotated, Any, NoReturn, TypeVar

import nats.errors
import nats.js.errors
from fast_depends.dependencies import Dependant
from faststream import BaseMiddleware, Context
from faststream.exceptions import HandlerException, NackMessage, RejectMessage
from faststream.message import StreamMessage
from faststream.middlewares import AckPolicy
from faststream.nats import JStream, NatsBroker, NatsMessage, NatsRouter, PullSub
from faststream.nats.security import (
    NatsCredentials,
    NatsSecurity,
    NatsToken,
    NatsUserPassword,
)
from nats.aio.client import Client as NatsClient
from nats.aio.msg import Msg

from nexus_events.contract import codec
from nexus_events.contract.codec import Decoded, JsMeta
from nexus_events.errors import BusError, BusUnavailable, DecodeError
from nexus_events.events.base import Event
from nexus_events.runtime import telemetry
from nexus_events.transport.bus import Bus, BusSettings
from nexus_events.transport.connect import connect_options
from nexus_events.transport.consume import (
    ConsumerSpec,
    GiveUp,
    after_failure,
    ensure_durable,
    keep_alive,
)
from nexus_events.transport.quiet_fetch import quiet_fetches

log = logging.getLogger(__name__)
# FastStream's own logger: it logs every message at the broker's log_level (DEBUG below) and
# each subscriber task's end at INFO ("callback for Task-N is being executed"); its warnings
# and errors (failed acks, handler crashes it sees) still come through.
broker_log = logging.getLogger(f"{__name__}.broker")
broker_log.setLevel(logging.WARNING)

F = TypeVar("F", bound=Callable[..., Awaitable[Any]])

# Errors of settling itself (dead letter, ack): the message is naked and comes back.
_SETTLE_ERRORS = (nats.errors.Error, nats.js.errors.Error, BusError)


class Retry(NackMessage):
    """Raise in a handler: redeliver this message after `delay` (else the spec's backoff);
    on the last delivery it is dead-lettered instead."""

    def __init__(self, delay: float | None = None, reason: str = "handler asked for a retry"):
        super().__init__()
        self.delay = delay
        self.reason = reason


class Reject(RejectMessage):
    """Raise in a handler: give up on this message, dead-letter it with `reason`."""

    def __init__(self, reason: str, error: str) -> None:
        super().__init__()
        self.reason = reason
        self.error = error


class NexusMessage(NatsMessage):
    """A JetStream message with its Nexus decoding (or the reason it does not decode)."""

    decoded: Decoded | None = None
    decode_error: DecodeError | None = None


async def parse(msg: Msg) -> StreamMessage[Msg]:
    """FastStream parser: never raises (a parse error would leave the message unsettled);
    what does not decode is carried to the settling middleware as `decode_error`."""
    headers = msg.headers or {}
    message = NexusMessage(
        raw_message=msg,
        body=msg.data,
        headers=headers,
        reply_to="",
        content_type=headers.get("content-type"),
        message_id=headers.get("Nats-Msg-Id"),
        correlation_id=headers.get("Nexus-Correlation-Id"),
    )
    try:
        message.decoded = codec.decode(
            msg.subject, msg.data, msg.headers, JsMeta.from_reply(msg.reply)
        )
    except DecodeError as exc:
        message.decode_error = exc
    return message


async def decode(message: StreamMessage[Msg]) -> Event:
    """FastStream decoder: the body a handler gets is the typed event."""
    assert isinstance(message, NexusMessage)
    assert message.decoded is not None
    return message.decoded.event


# A handler parameter: the whole decoded delivery (envelope, parsed subject, event).
Delivered = Annotated[Decoded, Context("message.decoded")]


@dataclass(eq=False)
class Durable:
    """One durable pull consumer declared on the broker, and what it has done so far."""

    spec: ConsumerSpec
    ordered: bool = False
    processed: int = 0
    dead_lettered: int = 0
    subscriber: Any = field(default=None, repr=False)


class Handlers:
    """A FastStream broker for a service's durable handlers (see the module docstring)."""

    def __init__(
        self,
        bus: Bus,
        settings: BusSettings | None = None,
        *,
        graceful_timeout: float = 15.0,
        drain_timeout: int = 5,
    ) -> None:
        self.bus = bus
        self.settings = settings or bus.settings
        self.broker = make_broker(
            self.settings, graceful_timeout=graceful_timeout, drain_timeout=drain_timeout
        )
        self.durables: list[Durable] = []
        self._connection: NatsClient | None = None

    @property
    def connected(self) -> bool:
        return self._connection is not None and self._connection.is_connected

    def durable(
        self,
        spec: ConsumerSpec,
        *,
        ordered: bool = False,
        dependencies: tuple[Dependant, ...] = (),
    ) -> Callable[[F], F]:
        """Decorator: `func` becomes the FastStream handler of the durable consumer `spec`.

        `ordered` handles one message at a time in stream order (a fetch of one); otherwise
        the messages of a fetch (up to ``spec.batch``) are handled concurrently.
        """
        durable = Durable(spec, ordered)
        router = NatsRouter(middlewares=(_settlement(self.bus, durable),))
        subscriber = router.subscriber(
            spec.filter_subjects[0] if spec.filter_subjects else ">",
            stream=JStream(spec.stream, declare=False),
            durable=spec.durable,
            config=spec.config(),
            pull_sub=PullSub(batch_size=1 if ordered else spec.batch, timeout=spec.fetch_timeout),
            ack_policy=AckPolicy.NACK_ON_ERROR,
            parser=parse,
            decoder=decode,
            dependencies=dependencies,
            title=spec.durable,
        )
        # Timed-out last deliveries are never redelivered: the server's advisory says which.
        advisory = self.broker.subscriber(
            f"$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.{spec.stream}.{spec.durable}",
            include_in_schema=False,
        )

        async def on_max_deliveries(body: dict[str, Any]) -> None:
            await _dead_letter_advisory(self.bus, durable, body)

        advisory(on_max_deliveries)

        def register(func: F) -> F:
            durable.subscriber = subscriber(func)
            self.broker.include_router(router)
            self.durables.append(durable)
            return func

        return register

    async def start(self) -> None:
        """Create or update every durable (keeping an existing one's start), then start."""
        for d in self.durables:
            await ensure_durable(self.bus.js, d.spec)
        try:
            self._connection = await self.broker.connect()
        except (OSError, nats.errors.Error) as exc:
            raise BusUnavailable(f"cannot connect to NATS at {self.settings.url}: {exc}") from exc
        # Before the subscribers exist: an idle fetch that times out must not log an ERROR.
        quiet_fetches(self.broker.config.connection_state.stream)
        # Like Bus.connect: the first connect tried `connect_attempts` times, now reconnect
        # for as long as the settings say.
        self._connection.options["max_reconnect_attempts"] = self.settings.max_reconnect_attempts
        await self.broker.start()

    async def stop(self) -> None:
        """Stop fetching, let handlers in flight finish (graceful timeout), close.

        Never raises: with NATS away, FastStream's unsubscribe or drain fails; the connection
        is then closed as it is (unsettled messages come back to the durable after ack_wait).
        """
        connection, self._connection = self._connection, None
        try:
            await self.broker.stop()
        except Exception as exc:  # noqa: BLE001 - a failed drain must not stop the app's stop
            log.warning("stopping the FastStream broker failed, closing: %r", exc)
            if connection is not None and not connection.is_closed:
                with contextlib.suppress(OSError, nats.errors.Error):
                    await connection.close()


def make_broker(
    settings: BusSettings, *, graceful_timeout: float = 15.0, drain_timeout: int = 5
) -> NatsBroker:
    """A FastStream `NatsBroker` connecting the way `Bus.connect` does with `settings`.

    The same nats-py options (`nexus_events.transport.connect.connect_options`), except credentials:
    FastStream takes those as a `security` object and refuses nats-py's ``user``/``password``.
    """

    async def on_error(exc: Exception) -> None:
        log.warning("nats error (handlers): %s", exc)

    options = connect_options(settings)
    for credential in ("user", "password", "token", "user_credentials"):
        options.pop(credential, None)
    options["error_cb"] = on_error
    return NatsBroker(
        **options,
        security=broker_security(settings),
        drain_timeout=drain_timeout,
        graceful_timeout=graceful_timeout,
        logger=broker_log,
        log_level=logging.DEBUG,
    )


def broker_security(settings: BusSettings) -> NatsSecurity | None:
    """`settings`' credentials as FastStream's security object (one kind: a .creds file, else
    user and password, else a token), or None for an open server."""
    if settings.creds_file:
        return NatsCredentials(settings.creds_file)
    if settings.user:
        return NatsUserPassword(settings.user, settings.password or "")
    if settings.token:
        return NatsToken(settings.token)
    return None


def _settlement(bus: Bus, durable: Durable) -> Callable[..., BaseMiddleware]:
    """The middleware factory FastStream calls per message of `durable`'s subscriber."""

    def make(msg: Any, /, *, context: Any) -> BaseMiddleware:
        return _Settlement(msg, context=context, bus=bus, durable=durable)

    return make


class _Settlement(BaseMiddleware):
    """Turns a handler's outcome into ack / nak with backoff / dead letter + term.

    FastStream's AcknowledgementMiddleware (NACK_ON_ERROR) does the acking around this: a
    return acks, `NackMessage(delay=)` naks, `RejectMessage` terminates.
    """

    def __init__(self, msg: Any, /, *, context: Any, bus: Bus, durable: Durable) -> None:
        super().__init__(msg, context=context)
        self.bus = bus
        self.durable = durable

    async def consume_scope(
        self, call_next: Callable[[StreamMessage[Any]], Awaitable[Any]], msg: StreamMessage[Any]
    ) -> Any:
        assert isinstance(msg, NexusMessage)
        raw: Msg = msg.raw_message
        if msg.decode_error is not None:
            await self._give_up(raw, msg.decode_error.reason, str(msg.decode_error), 0)
        assert msg.decoded is not None
        spec = self.durable.spec
        delivered = msg.decoded.envelope.num_delivered
        keepalive = asyncio.create_task(keep_alive([raw], spec.ack_wait))
        try:
            with telemetry.consumer_span(
                f"consume {spec.durable}", raw.headers, {"messaging.batch.message_count": 1}
            ):
                return await call_next(msg)
        except Retry as exc:
            await self._retry(raw, delivered, exc.delay, exc.reason)
        except Reject as exc:
            await self._give_up(raw, exc.reason, exc.error, delivered)
        except NackMessage:
            await self._retry(raw, delivered, None, "handler asked for a retry")
        except HandlerException:
            raise  # FastStream's own Ack/Reject/Skip: as the handler said
        except Exception as exc:  # the handler is user code: any failure is a retry
            log.exception("handler of %s failed on %s", spec.durable, raw.subject)
            await self._retry(raw, delivered, None, f"{type(exc).__name__}: {exc}")
        finally:
            keepalive.cancel()
            self.durable.processed += 1
        raise AssertionError("unreachable: every branch above returns or raises")

    async def _retry(self, raw: Msg, delivered: int, delay: float | None, error: str) -> None:
        step = after_failure(self.durable.spec, delivered, delay, error)
        if isinstance(step, GiveUp):
            await self._give_up(raw, step.reason, step.error, delivered)
        raise NackMessage(delay=step)

    async def _give_up(self, raw: Msg, reason: str, error: str, delivered: int) -> NoReturn:
        """Dead-letter and terminate (raises RejectMessage); a message whose letter cannot
        be stored while NATS is away is naked and comes back."""
        try:
            stored = await self.bus.dead_letter(
                raw, reason=reason, error=error, consumer=self.durable.spec.durable
            )
        except _SETTLE_ERRORS as exc:
            log.warning("dead-lettering %s failed, it will be redelivered: %s", raw.subject, exc)
            raise NackMessage(delay=self.durable.spec.delay_for(delivered)) from exc
        if stored:
            self.durable.dead_lettered += 1
        raise RejectMessage()


async def _dead_letter_advisory(bus: Bus, durable: Durable, info: dict[str, Any]) -> None:
    spec = durable.spec
    try:
        stored = await bus.dead_letter_unacknowledged(spec.stream, spec.durable, info)
        if stored:
            durable.dead_lettered += 1
    except Exception:  # an advisory handler must never stop the subscription
        log.exception("could not dead-letter after a max-deliveries advisory")


__all__ = [
    "Delivered",
    "Durable",
    "Handlers",
    "NexusMessage",
    "Reject",
    "Retry",
    "decode",
    "ensure_durable",
    "make_broker",
    "parse",
]
