"""`Bus`: a service's one connection to JetStream, made of the parts that each live in their
own module and are re-exported here:

- `nexus_events.transport.connect`: `BusSettings` (env ``NEXUS_NATS_*``) and the connection itself.
- `nexus_events.transport.publish`: `publish` returns only once JetStream has stored the
  event (or raises `PublishFailed`); retries across reconnects reuse the same ``Nats-Msg-Id``.
- `nexus_events.transport.dead_letters`: `dead_letter` copies a message to
  ``nexus.dlq.v1.<source>``.
- `nexus_events.transport.replay`: `replay` reads a stream (or one run) in order to its current end.
- `nexus_events.transport.consume`: `consumer` makes a durable `Consumer`.
"""

from __future__ import annotations

import asyncio
import contextlib

import nats.errors

from nexus_events.contract import subjects
from nexus_events.contract.streams import DLQ, STREAM_OF_FAMILY
from nexus_events.transport.connect import BusSettings, connect
from nexus_events.transport.consume import (
    FETCH_AWAY_ERRORS,
    BatchHandler,
    Consumer,
    ConsumerSpec,
    Delivery,
    decode_msg,
)
from nexus_events.transport.dead_letters import DeadLetterPublisher
from nexus_events.transport.publish import Outgoing
from nexus_events.transport.replay import Replayer


class Bus(DeadLetterPublisher, Replayer):
    """A service's connection to the Nexus event bus: publish (`nexus_events.transport.publish`),
    file dead letters (`nexus_events.transport.dead_letters`), replay
    (`nexus_events.transport.replay`) and make durable consumers
    (`nexus_events.transport.consume`)."""

    @classmethod
    async def connect(cls, settings: BusSettings | None = None, *, source: str) -> Bus:
        """Connect with reconnects enabled; raise `BusUnavailable` if NATS cannot be reached."""
        settings = settings or BusSettings()
        return cls(await connect(settings), settings, source)

    async def close(self) -> None:
        """Flush and close the connection (stop consumers first: `Consumer.stop`)."""
        if self.nc.is_closed:
            return
        with contextlib.suppress(nats.errors.Error, asyncio.TimeoutError):
            await asyncio.wait_for(self.nc.flush(), timeout=2)
        # While nats-py is reconnecting (server gone), closing can raise the socket's error.
        with contextlib.suppress(OSError):
            await self.nc.close()

    def consumer(self, spec: ConsumerSpec, handler: BatchHandler) -> Consumer:
        return Consumer(self, spec, handler)


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
