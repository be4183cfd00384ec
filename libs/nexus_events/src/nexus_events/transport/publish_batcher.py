"""`PublishBatcher`: many tasks' single publishes sent as pipelined batches (a group commit).

A task that publishes one event and waits for its ack pays a socket write and a round trip of
its own; a thousand such tasks at once (the scheduler's starts after a burst of requests) pay
a thousand. The batcher sends the first event at once and gathers the ones handed to it while
that batch is in flight into the next one (`Publisher.publish_many_encoded`), so a burst goes
out in a few pipelined batches and a lone event waits for nothing.

Each caller encodes its own event (`Publisher.encode`, in its own trace context and with its
own ``Nats-Msg-Id``) and gets its own outcome. A batch that fails is sent again one message
at a time, all at once (`Publisher.publish_encoded`, each with its own deadline): the messages
that were stored come back as duplicates of themselves, so each caller gets its own ack or
its own error, and one refused message fails only its caller. (A pipelined publish cannot tell
which message JetStream refused: nats-py never settles that one's future, so the batch fails
on its deadline.)
"""

from __future__ import annotations

import asyncio
import contextlib

from nats.js.api import PubAck

from nexus_events.contract.codec import Encoded
from nexus_events.transport.publish import Publisher

_Pending = tuple[Encoded, "asyncio.Future[PubAck]"]


class PublishBatcher:
    """`await publish(encoded)` returns once JetStream stored it (see the module)."""

    def __init__(self, publisher: Publisher) -> None:
        self._publisher = publisher
        self._pending: list[_Pending] = []
        self._sending: asyncio.Task[None] | None = None
        self.batches = 0  # batches sent (tests and benchmarks read it)

    async def publish(self, encoded: Encoded) -> PubAck:
        future: asyncio.Future[PubAck] = asyncio.get_running_loop().create_future()
        self._pending.append((encoded, future))
        if self._sending is None or self._sending.done():
            self._sending = asyncio.create_task(self._send_all(), name="publish batcher")
        return await future

    async def close(self) -> None:
        """Wait until everything handed over has been sent (or has failed)."""
        if self._sending is not None:
            with contextlib.suppress(Exception):
                await self._sending

    async def _send_all(self) -> None:
        while self._pending:
            batch, self._pending = self._pending, []
            self.batches += 1
            try:
                acks = await self._publisher.publish_many_encoded([e for e, _ in batch])
            except Exception as exc:  # noqa: BLE001 - each caller gets its own outcome below
                if len(batch) == 1:
                    _settle(batch[0][1], exc=exc)
                else:
                    await asyncio.gather(*(self._alone(e, f) for e, f in batch))
            else:
                for (_, future), ack in zip(batch, acks, strict=True):
                    _settle(future, ack=ack)

    async def _alone(self, encoded: Encoded, future: asyncio.Future[PubAck]) -> None:
        try:
            ack = await self._publisher.publish_encoded(encoded)
        except Exception as exc:  # noqa: BLE001 - this message's own error, to its caller
            _settle(future, exc=exc)
        else:
            _settle(future, ack=ack)


def _settle(
    future: asyncio.Future[PubAck], *, ack: PubAck | None = None, exc: Exception | None = None
) -> None:
    if future.done():  # its caller was cancelled: the event went (or failed) all the same
        return
    if exc is not None:
        future.set_exception(exc)
    elif ack is not None:
        future.set_result(ack)


__all__ = ["PublishBatcher"]
