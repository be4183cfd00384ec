"""A subject of its own run the runner follows live: a named push consumer, made again from
where it left off when the server lost it (a restart), as nats-py's ordered consumers did.

Named and filtered as `nexus_events.contract.run_access` says and delivered on the connection's own
reply prefix: a run's NATS credential may make exactly these consumers and read exactly these
deliveries (an ordered consumer's unnamed ones could be on anything, so it may make none).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable

import nats.errors
import nats.js.errors
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy
from nexus_events.contract.run_access import RunConsumer
from nexus_events.transport.bus import Bus

log = logging.getLogger(__name__)

# What JetStream's API raises while a stream or the meta group elects a leader, or while the
# connection moves to another server: making a consumer is retried on them.
ELECTION_ERRORS = (
    nats.errors.TimeoutError,
    nats.errors.NoRespondersError,
    nats.errors.ConnectionReconnectingError,
    nats.errors.StaleConnectionError,
    nats.js.errors.ServiceUnavailableError,
)
# Waits between attempts: 50 ms doubling to 1 s, as a publish's retries.
_FIRST_RETRY_DELAY = 0.05
_LAST_RETRY_DELAY = 1.0
# Seconds a consumer survives without its runner listening (a reconnect's gap).
_CONSUMER_INACTIVE = 120.0


class FollowedSubject:
    """One consumer of the run's control channel and the subscription its messages come on."""

    def __init__(
        self,
        bus: Bus,
        consumer: RunConsumer,
        start_seq: int,
        on_msg: Callable[[Msg], Awaitable[None]],
    ) -> None:
        self.bus = bus
        self.consumer = consumer
        # The stream sequence the consumer (re)starts from: one past the last message seen.
        self.next_seq = start_seq
        self._on_msg = on_msg
        self._deliver = bus.nc.new_inbox()
        self._sub: Subscription | None = None

    async def start(self) -> None:
        """Subscribe, then make the consumer (retried as `make` says)."""
        self._sub = await self.bus.nc.subscribe(self._deliver, cb=self._received)
        # The attempt is in the name, so no dead attempt's consumer has it; a restart of this
        # attempt may have left one: start afresh.
        await self._delete()
        try:
            await self.make()
        except BaseException:
            await self.stop()
            raise

    async def make(self) -> None:
        """Make the consumer from `next_seq`, retried through a JetStream leader election or a
        reconnect (its API answers 503, nothing or too late for a few seconds) for as long as
        a publish would be (``publish_deadline``)."""
        deadline = time.monotonic() + self.bus.settings.publish_deadline
        delay = _FIRST_RETRY_DELAY
        while True:
            try:
                await self.bus.js.add_consumer(self.consumer.stream, self._config())
            except ELECTION_ERRORS as exc:
                if time.monotonic() + delay >= deadline:
                    raise
                log.info("following %s: JetStream busy (%s); retrying", self.consumer.filter, exc)
            else:
                return
            await asyncio.sleep(delay)  # a backoff between attempts, not a wait for a condition
            delay = min(delay * 2, _LAST_RETRY_DELAY)

    async def ensure(self) -> None:
        """Make the consumer again if the server no longer has it (restarted, or it expired
        while the runner was away); anything else (a busy or absent server) waits a round."""
        try:
            await self.bus.js.consumer_info(self.consumer.stream, self.consumer.name)
        except nats.js.errors.NotFoundError:
            log.warning(
                "following %s: its consumer is gone; following again from %d",
                self.consumer.filter,
                self.next_seq,
            )
            with contextlib.suppress(*ELECTION_ERRORS):
                await self.make()
        except (nats.errors.Error, nats.js.errors.Error, TimeoutError):
            return

    async def stop(self) -> None:
        if self._sub is not None:
            with contextlib.suppress(nats.errors.Error):
                await self._sub.unsubscribe()
            self._sub = None
        await self._delete()

    async def _delete(self) -> None:
        with contextlib.suppress(nats.errors.Error, nats.js.errors.Error, TimeoutError):
            await self.bus.js.delete_consumer(self.consumer.stream, self.consumer.name)

    def _config(self) -> ConsumerConfig:
        seq = self.next_seq
        return ConsumerConfig(
            name=self.consumer.name,
            filter_subject=self.consumer.filter,
            deliver_subject=self._deliver,
            deliver_policy=DeliverPolicy.BY_START_SEQUENCE if seq > 1 else DeliverPolicy.ALL,
            opt_start_seq=seq if seq > 1 else None,
            ack_policy=AckPolicy.NONE,
            mem_storage=True,
            num_replicas=1,
            inactive_threshold=_CONSUMER_INACTIVE,
        )

    async def _received(self, msg: Msg) -> None:
        with contextlib.suppress(ValueError, IndexError, nats.errors.Error):
            self.next_seq = max(self.next_seq, msg.metadata.sequence.stream + 1)
        await self._on_msg(msg)


__all__ = ["ELECTION_ERRORS", "FollowedSubject"]
