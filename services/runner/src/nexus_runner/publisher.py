"""Publishes a run's events and log lines, pipelined, with deterministic message ids."""

from __future__ import annotations

import asyncio
import itertools
import time
from collections import deque
from dataclasses import dataclass

import nats.errors
import nats.js.errors
from nats.js import JetStreamContext
from nats.js.api import PubAck
from nexus_events.contract import subjects
from nexus_events.contract.codec import Encoded
from nexus_events.errors import BusError, PublishFailed
from nexus_events.events.base import Event
from nexus_events.events.logs import LogLine
from nexus_events.events.runs import TerminalEvent
from nexus_events.transport.bus import Bus

from nexus_runner.safety import SecretRegistry

# Events sent whose acks are still outstanding before a send waits for the oldest one. A run
# sends a handful of events per turn, so this is only reached when acks stop coming.
PIPELINE_WINDOW = 256


@dataclass(slots=True)
class _Unacked:
    """An event handed to the connection whose JetStream ack has not been seen yet."""

    enc: Encoded
    sent_at: float
    # None: the send itself failed or was interrupted; the event is published again.
    ack: asyncio.Future[PubAck] | None = None


class RunPublisher:
    """Events of one run attempt: ``<run_id>:<attempt>:<event>:<n>`` ids make retries safe.

    `event` and `log` send at once and do not wait for JetStream's ack, so a turn costs no
    NATS round trip; acks are collected as later events go out. Sends are in order on the
    one connection, so the stream keeps the run's order. An event whose ack is an error or
    has not come within ``publish_timeout`` is published again, with the same
    ``Nats-Msg-Id`` (JetStream drops it as a duplicate if the first copy was stored), until
    ``publish_deadline``, before the next event is sent; while the connection is away, every
    event sent before is settled before the next one is sent. Only an event lost in flight
    when the connection drops can still be stored after one queued just behind it; each is
    stored once either way, and the ``<n>`` of its id gives the run's order.

    If the retry fails too, or JetStream refuses an event, the failure sticks: this and every
    later `event`, `log` and `flush` raises it (`PublishFailed`, `BusUnavailable`). `flush`
    returns once every event so far is stored: call it before anything that must not happen
    without a complete record (side effects, waiting on a person, the end). `terminal`
    publishes the run's last event and waits for its ack.
    """

    def __init__(
        self,
        bus: Bus,
        run_id: str,
        attempt: int,
        *,
        window: int = PIPELINE_WINDOW,
        secrets: SecretRegistry | None = None,
    ) -> None:
        self.bus = bus
        # Every event and log line leaves with the run's secret values redacted.
        self.secrets = secrets if secrets is not None else SecretRegistry()
        self.run_id = run_id
        self.attempt = attempt
        self.window = window
        self._timeout = bus.settings.publish_timeout
        self._js = self._new_context()
        self._counter = itertools.count(1)
        self._log_seq = itertools.count(0)
        self._unacked: deque[_Unacked] = deque()
        # Sends, retries and flushes one at a time (the loop and the heartbeat task share
        # the publisher): a retried event goes out again before anything sent after it.
        self._lock = asyncio.Lock()
        self._failure: Exception | None = None
        self.republished = 0  # events sent again after an error or a missing ack

    @property
    def pending(self) -> int:
        """Events sent whose ack has not been collected yet."""
        return len(self._unacked)

    async def event(self, event: Event) -> None:
        name = type(event).event_name
        msg_id = f"{self.run_id}:{self.attempt}:{name}:{next(self._counter)}"
        await self._send(self._encode(subjects.run_event(self.run_id, type(event)), event, msg_id))

    async def log(self, stream: str, text: str, turn: int | None = None) -> None:
        seq = next(self._log_seq)
        line = LogLine(seq=seq, stream=stream, text=self.secrets.redact(text), turn=turn)
        msg_id = f"{self.run_id}:{self.attempt}:log:{seq}"
        await self._send(self._encode(subjects.run_log(self.run_id), line, msg_id))

    async def flush(self) -> None:
        """Wait until every event sent so far is stored (retrying as above), or raise."""
        async with self._lock:
            self._raise_failure()
            await self._settle(everything=True)

    async def terminal(self, event: TerminalEvent) -> None:
        """Publish the run's last event and wait until it is stored; `flush` first.

        It is published even after a failure of earlier events (the caller decides what the
        run's end says then). Raises `PublishFailed` or `BusUnavailable`.
        """
        name = type(event).event_name
        msg_id = f"{self.run_id}:{self.attempt}:{name}:{next(self._counter)}"
        enc = self._encode(subjects.run_event(self.run_id, type(event)), event, msg_id)
        async with self._lock:
            await self.bus.publish_encoded(enc)

    # -- pipeline ----------------------------------------------------------------------------

    def _new_context(self) -> JetStreamContext:
        # The run's own context: its ack subscription and in-flight limit are the run's alone.
        return self.bus.nc.jetstream(timeout=self._timeout, publish_async_max_pending=self.window)

    def _encode(self, subject: str, event: Event, msg_id: str) -> Encoded:
        # At the call, in the caller's span: the event carries the caller's trace context.
        return self.bus.encode(subject, self._redacted(event), msg_id=msg_id)

    def _redacted(self, event: Event) -> Event:
        """`event` with the run's secret values redacted from every string in it."""
        if not len(self.secrets):
            return event
        data = event.model_dump(mode="json")
        clean = self.secrets.redact_tree(data)
        return event if clean == data else type(event).model_validate(clean)

    async def _send(self, enc: Encoded) -> None:
        self._raise_failure()
        async with self._lock:
            self._raise_failure()
            # While the connection is away, nothing is queued behind an event that may have
            # been lost with it: everything sent before is settled first, so a retried event
            # is still stored before the ones sent after it.
            await self._settle(everything=not self.bus.nc.is_connected)
            entry = _Unacked(enc, time.monotonic())
            self._unacked.append(entry)
            try:
                # No `wait_stall`: with one, nats-py starts a task per send. The window above
                # keeps the in-flight acks below the context's limit, so this never stalls.
                entry.ack = await self._js.publish_async(enc.subject, enc.body, headers=enc.headers)
            except nats.errors.Error:
                # Not sent (connection closed, payload too big): `ack` stays None and the next
                # settle publishes the event again. nats-py may keep the failed send's
                # in-flight slot, so later sends use a fresh context.
                self._js = self._new_context()

    async def _settle(self, *, everything: bool) -> None:
        """Collect acks from the oldest event on; publish failed or overdue events again.

        Without `everything` it stops at the first ack still on time (unless the window is
        full); with it, it waits for each ack up to ``publish_timeout`` after its send.
        """
        while self._unacked:
            entry = self._unacked[0]
            ack = entry.ack
            if ack is not None and not ack.done():
                waited = time.monotonic() - entry.sent_at
                if not everything and waited < self._timeout and len(self._unacked) < self.window:
                    return
                await asyncio.wait({ack}, timeout=max(self._timeout - waited, 0.0))
            if ack is not None and ack.done() and not ack.cancelled() and ack.exception() is None:
                self._unacked.popleft()
                continue
            await self._republish(entry)
            self._unacked.popleft()

    async def _republish(self, entry: _Unacked) -> None:
        ack, error = entry.ack, None
        if ack is not None:
            if not ack.done():
                ack.cancel()  # frees nats-py's in-flight slot; a late ack is ignored
            elif not ack.cancelled():
                error = ack.exception()
        refused = isinstance(error, nats.js.errors.APIError) and not isinstance(
            error, nats.js.errors.ServiceUnavailableError
        )
        try:
            if refused:
                raise PublishFailed(f"JetStream refused {entry.enc.subject}: {error}") from error
            self.republished += 1
            try:
                await self.bus.publish_encoded(entry.enc)
            except nats.errors.Error as exc:  # e.g. larger than the server's max_payload
                raise PublishFailed(f"cannot publish {entry.enc.subject}: {exc!r}") from exc
        except BusError as exc:
            self._give_up(exc)
            raise

    def _give_up(self, failure: Exception) -> None:
        """Make `failure` stick and drop what is still unacked (the run ends failed)."""
        self._failure = failure
        for entry in self._unacked:
            if entry.ack is None:
                continue
            if not entry.ack.done():
                entry.ack.cancel()
            elif not entry.ack.cancelled():
                entry.ack.exception()  # retrieved: no "exception never retrieved" noise
        self._unacked.clear()

    def _raise_failure(self) -> None:
        if self._failure is not None:
            raise self._failure
