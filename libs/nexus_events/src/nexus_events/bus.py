"""Publishing, dead-lettering and bounded replay on JetStream; durable consumers are made
here and live in `nexus_events.consume` (re-exported).

`Bus` wraps one nats-py connection for a service (its `source`). It guarantees:

- `publish` returns only once JetStream has stored the event (or raises `PublishFailed`);
  retries across reconnects reuse the same ``Nats-Msg-Id`` so a retry is never stored twice.
- `consumer` makes a `Consumer` (see `nexus_events.consume`).
- `replay` reads a stream (or one run) in order from a sequence to the current end.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import AsyncIterator, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import nats
import nats.errors
import nats.js.errors
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy, PubAck
from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from nexus_events import codec, subjects, telemetry
from nexus_events.codec import Decoded, Encoded, JsMeta
from nexus_events.consume import (
    FETCH_AWAY_ERRORS,
    BatchHandler,
    Consumer,
    ConsumerSpec,
    Delivery,
    decode_msg,
)
from nexus_events.dead_letters import build_dead_letter, dead_letter_id, reference_only
from nexus_events.errors import (
    BusError,
    BusUnavailable,
    DecodeError,
    PublishFailed,
    PublishRejected,
)
from nexus_events.events.base import Event
from nexus_events.events.dlq import DeadLetter
from nexus_events.natsclient import Client
from nexus_events.pull import PullReader
from nexus_events.streams import DLQ, STREAM_OF_FAMILY

log = logging.getLogger(__name__)

# Errors after which a publish is retried with the same Nats-Msg-Id (dedupe makes it safe).
# A closed connection is not among them: it never comes back (BusUnavailable at once).
_RETRYABLE = (
    nats.errors.TimeoutError,
    nats.errors.ConnectionReconnectingError,
    nats.errors.NoRespondersError,
    nats.js.errors.NoStreamResponseError,
    nats.errors.StaleConnectionError,
    asyncio.TimeoutError,
)
# Waits between publish attempts: 50 ms, doubling, at most 1 s (a reconnect takes ~0.1-2 s).
_FIRST_RETRY_DELAY = 0.05
_LAST_RETRY_DELAY = 1.0


class BusSettings(BaseSettings):
    """How to reach NATS. Env: NEXUS_NATS_<FIELD>."""

    model_config = SettingsConfigDict(env_prefix="NEXUS_NATS_", extra="ignore")

    url: str = Field("nats://127.0.0.1:4222", description="Comma-separated server URLs.")
    name: str = Field("nexus", description="Connection name shown by the server.")
    user: str | None = None
    password: str | None = None
    token: str | None = None
    creds_file: str | None = Field(None, description="Path of a .creds file (NGS, operator).")
    connect_timeout: float = Field(2.0, gt=0)
    # The first connect also runs this reconnect loop: attempts x wait bounds start-up.
    reconnect_time_wait: float = Field(0.5, gt=0)
    max_reconnect_attempts: int = Field(-1, description="-1 = keep trying forever.")
    connect_attempts: int = Field(10, ge=1, description="Attempts of the very first connect.")
    # A dead TCP connection is noticed after ping_interval x max_outstanding_pings seconds.
    ping_interval: float = Field(10.0, gt=0)
    max_outstanding_pings: int = Field(3, ge=1)
    publish_timeout: float = Field(5.0, gt=0, description="Wait for one ack.")
    publish_deadline: float = Field(
        30.0, gt=0, description="Keep retrying a publish (reconnects) for this long."
    )
    publish_window: int = Field(500, gt=0, description="In-flight acks in publish_many.")


@dataclass(frozen=True)
class Outgoing:
    """One event to publish with `Bus.publish_many`."""

    subject: str
    event: Event
    msg_id: str | None = None
    correlation_id: str | None = None
    causation_id: str | None = None


class Bus:
    """A service's connection to the Nexus event bus."""

    def __init__(self, nc: Client, settings: BusSettings, source: str) -> None:
        self.nc = nc
        self.js: JetStreamContext = nc.jetstream(timeout=settings.publish_timeout)
        self.settings = settings
        self.source = subjects.validate_token(source, "service name")
        self._pipelines: dict[int, JetStreamContext] = {}

    @classmethod
    async def connect(cls, settings: BusSettings | None = None, *, source: str) -> Bus:
        """Connect with reconnects enabled; raise `BusUnavailable` if NATS cannot be reached."""
        settings = settings or BusSettings()

        async def on_error(exc: Exception) -> None:
            log.warning("nats error: %s", exc)

        async def on_disconnect() -> None:
            log.warning("nats disconnected")

        async def on_reconnect() -> None:
            log.info("nats reconnected")

        options: dict[str, Any] = {
            "servers": settings.url.split(","),
            "name": settings.name,
            "connect_timeout": settings.connect_timeout,
            "reconnect_time_wait": settings.reconnect_time_wait,
            "max_reconnect_attempts": settings.connect_attempts,
            "ping_interval": settings.ping_interval,
            "max_outstanding_pings": settings.max_outstanding_pings,
            "error_cb": on_error,
            "disconnected_cb": on_disconnect,
            "reconnected_cb": on_reconnect,
        }
        if settings.user:
            options.update(user=settings.user, password=settings.password)
        if settings.token:
            options["token"] = settings.token
        if settings.creds_file:
            options["user_credentials"] = settings.creds_file
        nc = Client()
        try:
            await nc.connect(**options)
        except (OSError, nats.errors.Error) as exc:
            raise BusUnavailable(f"cannot connect to NATS at {settings.url}: {exc}") from exc
        # Once connected, reconnect for as long as the settings say (forever by default).
        nc.options["max_reconnect_attempts"] = settings.max_reconnect_attempts
        return cls(nc, settings, source)

    async def close(self) -> None:
        """Flush and close the connection (stop consumers first: `Consumer.stop`)."""
        if self.nc.is_closed:
            return
        with contextlib.suppress(nats.errors.Error, asyncio.TimeoutError):
            await asyncio.wait_for(self.nc.flush(), timeout=2)
        # While nats-py is reconnecting (server gone), closing can raise the socket's error.
        with contextlib.suppress(OSError):
            await self.nc.close()

    # -- publishing ----------------------------------------------------------------------

    def encode(
        self,
        subject: str,
        event: Event,
        *,
        msg_id: str | None = None,
        correlation_id: str | None = None,
        causation_id: str | None = None,
    ) -> Encoded:
        headers = telemetry.inject({})
        return codec.encode(
            subject,
            event,
            source=self.source,
            msg_id=msg_id,
            correlation_id=correlation_id,
            causation_id=causation_id,
            headers=headers,
        )

    async def publish(
        self,
        subject: str,
        event: Event,
        *,
        msg_id: str | None = None,
        correlation_id: str | None = None,
        causation_id: str | None = None,
    ) -> PubAck:
        """Publish `event` on `subject` and wait until JetStream stored it.

        Without `msg_id` the id is derived from subject and body, so publishing the same
        event twice stores it once. Raises `InvalidSubject` (nothing sent) or `PublishFailed`.
        """
        enc = self.encode(
            subject, event, msg_id=msg_id, correlation_id=correlation_id, causation_id=causation_id
        )
        return await self.publish_encoded(enc)

    async def publish_encoded(self, enc: Encoded) -> PubAck:
        """Publish an already encoded message, retrying across reconnects until the deadline.

        A timeout, a reconnect in progress, no responders or JetStream unavailable are
        retried with the same message id (so JetStream stores it once), waiting 50 ms
        doubling to 1 s, while the next wait still ends before `publish_deadline`.
        """
        # Hand-written, not tenacity (used for the projection's and the Kubernetes watches'
        # retries): this is every single publish's path, and tenacity.AsyncRetrying cost
        # ~45 us per call here (sequential publish 119-128 -> 164-197 us, same run).
        deadline = time.monotonic() + self.settings.publish_deadline
        delay = _FIRST_RETRY_DELAY
        while True:
            try:
                return await self.js.publish(
                    enc.subject,
                    enc.body,
                    timeout=self.settings.publish_timeout,
                    headers=enc.headers,
                )
            except _RETRYABLE as exc:
                if time.monotonic() + delay >= deadline:
                    raise PublishFailed(
                        f"no ack for {enc.subject} within {self.settings.publish_deadline}s: "
                        f"{type(exc).__name__} (is NATS up and are the streams ensured?)"
                    ) from exc
            except nats.errors.ConnectionClosedError as exc:
                raise BusUnavailable("the NATS connection is closed") from exc
            except nats.js.errors.ServiceUnavailableError as exc:
                if time.monotonic() + delay >= deadline:
                    raise PublishFailed(f"JetStream unavailable for {enc.subject}: {exc}") from exc
            except nats.js.errors.APIError as exc:
                raise PublishRejected(f"JetStream refused {enc.subject}: {exc}") from exc
            except nats.errors.MaxPayloadError as exc:
                raise PublishRejected(
                    f"{enc.subject}: {len(enc.body)} bytes exceed the server's max_payload"
                ) from exc
            except nats.errors.Error as exc:
                raise PublishFailed(f"publishing {enc.subject} failed: {exc}") from exc
            await asyncio.sleep(delay)
            delay = min(delay * 2, _LAST_RETRY_DELAY)

    async def publish_many(
        self, items: Iterable[Outgoing], *, window: int | None = None
    ) -> list[PubAck]:
        """Publish many events pipelined (up to `window` acks in flight), in order.

        Returns the acks in input order. Any message whose pipelined publish fails is retried
        alone with the same id, so the call succeeds or raises `PublishFailed` as a whole.
        """
        encoded = [
            self.encode(
                o.subject,
                o.event,
                msg_id=o.msg_id,
                correlation_id=o.correlation_id,
                causation_id=o.causation_id,
            )
            for o in items
        ]
        return await self.publish_many_encoded(encoded, window=window)

    async def publish_many_encoded(
        self, encoded: Sequence[Encoded], *, window: int | None = None
    ) -> list[PubAck]:
        """Pipelined publish of encoded messages; see `publish_many`."""
        js = self._pipelined_js(window or self.settings.publish_window)
        futures: list[asyncio.Future[PubAck]] = []
        try:
            for enc in encoded:
                futures.append(await js.publish_async(enc.subject, enc.body, headers=enc.headers))
        except nats.errors.Error:
            pass  # whatever was not sent is published one by one below
        if futures:
            # publish_async futures have no timeout of their own.
            await asyncio.wait(futures, timeout=self.settings.publish_timeout)
        acks: list[PubAck] = []
        for i, enc in enumerate(encoded):
            fut = futures[i] if i < len(futures) else None
            if fut is not None and fut.done() and not fut.cancelled() and fut.exception() is None:
                acks.append(fut.result())
                continue
            if fut is not None and not fut.done():
                fut.cancel()
            error = (
                fut.exception() if fut is not None and fut.done() and not fut.cancelled() else None
            )
            if isinstance(error, nats.js.errors.APIError) and not isinstance(
                error, nats.js.errors.ServiceUnavailableError
            ):
                raise PublishRejected(f"JetStream refused {enc.subject}: {error}") from error
            # Lost in a reconnect or timed out: publish again with the same id (deduped).
            acks.append(await self.publish_encoded(enc))
        return acks

    def _pipelined_js(self, window: int) -> JetStreamContext:
        # One context per window size: each owns a reply subscription and an in-flight limit.
        js = self._pipelines.get(window)
        if js is None:
            js = self.nc.jetstream(
                timeout=self.settings.publish_timeout, publish_async_max_pending=window
            )
            self._pipelines[window] = js
        return js

    # -- dead letters --------------------------------------------------------------------

    async def dead_letter(
        self,
        msg: Msg,
        *,
        reason: str,
        error: str,
        consumer: str | None = None,
        num_delivered: int | None = None,
    ) -> bool:
        """Copy `msg` to ``nexus.dlq.v1.<source>`` with the reason (see `file_dead_letter`)."""
        stream = seq = None
        with contextlib.suppress(nats.errors.NotJSMessageError, ValueError, AttributeError):
            stream, seq = msg.metadata.stream, msg.metadata.sequence.stream
            if num_delivered is None:
                num_delivered = msg.metadata.num_delivered
        return await self.file_dead_letter(
            build_dead_letter(
                service=self.source,
                subject=msg.subject,
                data=msg.data,
                headers=dict(msg.headers or {}),
                reason=reason,
                error=error,
                consumer=consumer,
                stream=stream,
                stream_seq=seq,
                num_delivered=num_delivered or 0,
            )
        )

    async def file_dead_letter(self, letter: DeadLetter) -> bool:
        """Publish `letter` (built with `nexus_events.dead_letters.build_dead_letter`, so it
        fits); return whether it was stored.

        Idempotent per original, service, consumer and reason. If the server still refuses
        the letter, a reference-only letter (stream + sequence, size, digest) is tried, and if
        that is refused too the failure is logged with the original's position and False
        returned: a consumer must then go past the message rather than stop on it. Raises
        `BusUnavailable` / `PublishFailed` when NATS is away (try again later).
        """
        dlq_subject = subjects.dead_letter(letter.service)
        msg_id = dead_letter_id(
            letter.service, letter.consumer, letter.stream, letter.stream_seq, letter.reason
        )
        where = {
            "stream": letter.stream,
            "stream_seq": letter.stream_seq,
            "consumer": letter.consumer,
        }
        try:
            await self.publish(dlq_subject, letter, msg_id=msg_id)
        except PublishRejected as exc:
            # The reason is the whole story; a traceback would only repeat it.
            log.error("dead letter refused, storing a reference only: %s", exc, extra=where)  # noqa: TRY400
            try:
                await self.publish(dlq_subject, reference_only(letter), msg_id=msg_id)
            except PublishRejected as again:
                log.error(  # noqa: TRY400
                    "could not dead-letter %s (%s) at all; the original stays in %s at %s: %s",
                    letter.subject,
                    letter.reason,
                    letter.stream,
                    letter.stream_seq,
                    again,
                    extra=where,
                )
                return False
        log.warning(
            "dead-lettered %s (%s): %s", letter.subject, letter.reason, letter.error, extra=where
        )
        return True

    # -- consuming -----------------------------------------------------------------------

    def consumer(self, spec: ConsumerSpec, handler: BatchHandler) -> Consumer:
        return Consumer(self, spec, handler)

    async def replay(
        self,
        stream: str,
        *,
        start_seq: int = 1,
        filter_subject: str | None = None,
        run_id: str | None = None,
        batch: int = 500,
    ) -> AsyncIterator[Decoded]:
        """Yield the events of `stream` in order, from `start_seq` to the end as of the call.

        `run_id` filters NEXUS_RUNS to one run. Messages that do not decode are skipped (the
        live consumers dead-letter them). An ephemeral, ack-less consumer does the reading.
        """
        if run_id is not None:
            filter_subject = subjects.run_events_filter(run_id)
        async for msg in self.replay_raw(
            stream, start_seq=start_seq, filter_subject=filter_subject, batch=batch
        ):
            try:
                yield decode_msg(msg)
            except DecodeError:
                continue

    async def replay_raw(
        self,
        stream: str,
        *,
        start_seq: int = 1,
        filter_subject: str | None = None,
        filter_subjects: Sequence[str] = (),
        batch: int = 500,
        last_per_subject: bool = False,
    ) -> AsyncIterator[Msg]:
        """Like `replay` but yields the raw messages (undecodable ones included).

        `filter_subjects` (several) and `filter_subject` (one) narrow the replay; the
        messages still come in stream order. `last_per_subject` reads only the newest
        message of each subject that matches (e.g. the last heartbeat of some runs), and
        ignores `start_seq`.
        """
        filters = [*filter_subjects, *([filter_subject] if filter_subject else [])]
        name = f"replay_{uuid.uuid4().hex[:16]}"
        if last_per_subject:
            policy, opt_start = DeliverPolicy.LAST_PER_SUBJECT, None
        elif start_seq > 1:
            policy, opt_start = DeliverPolicy.BY_START_SEQUENCE, start_seq
        else:
            policy, opt_start = DeliverPolicy.ALL, None
        config = ConsumerConfig(
            name=name,
            deliver_policy=policy,
            opt_start_seq=opt_start,
            ack_policy=AckPolicy.NONE,
            filter_subject=filters[0] if len(filters) == 1 else None,
            filter_subjects=filters if len(filters) > 1 else None,
            inactive_threshold=60.0,
            mem_storage=True,
        )
        info = await self.js.add_consumer(stream, config)
        reader = await PullReader(self.nc, stream, name).start()
        try:
            remaining = info.num_pending or 0
            delivered = 0
            while remaining > 0:
                msgs = await reader.fetch(min(batch, remaining), 5.0)
                if not msgs:
                    raise BusError(f"replay of {stream} stalled with {remaining} left")
                for msg in msgs:
                    meta = JsMeta.from_reply(msg.reply)
                    if meta is None or meta.consumer_seq != delivered + 1:
                        raise BusError(f"replay of {stream} lost a message after {delivered}")
                    delivered, remaining = meta.consumer_seq, meta.num_pending
                    yield msg
        finally:
            await reader.close()
            with contextlib.suppress(nats.errors.Error, nats.js.errors.Error):
                await self.js.delete_consumer(stream, name)


def stream_for_subject(subject: str) -> str:
    """The stream a concrete subject is stored in."""
    return STREAM_OF_FAMILY[subjects.parse_subject(subject).family]


__all__ = [
    "DLQ",
    "FETCH_AWAY_ERRORS",
    "BatchHandler",
    "Bus",
    "BusSettings",
    "Consumer",
    "ConsumerSpec",
    "Delivery",
    "Outgoing",
    "decode_msg",
    "stream_for_subject",
]
