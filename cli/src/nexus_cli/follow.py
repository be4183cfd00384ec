"""Reading a stream from its start and on into the future, with no gap between the two.

An ordered push consumer (deliver all, no acks) replays what is stored and then delivers
new messages as they arrive, in stream order; nats-py recreates it on a gap.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncGenerator

import nats.errors
from nats.aio.msg import Msg
from nats.js.api import DeliverPolicy
from nexus_events.contract.codec import Decoded
from nexus_events.errors import DecodeError
from nexus_events.transport.bus import Bus, decode_msg

# Seconds one wait for the next message lasts before the caller's checks run again.
NEXT_TIMEOUT = 0.5


async def follow_raw(
    bus: Bus, stream: str, filter_subject: str, *, idle: float | None = None
) -> AsyncGenerator[Msg, None]:
    """Yield every message on `filter_subject`, old then new. With `idle`, stop after that
    many seconds without a message; otherwise the caller stops by closing the generator."""
    sub = await bus.js.subscribe(
        filter_subject,
        stream=stream,
        ordered_consumer=True,
        deliver_policy=DeliverPolicy.ALL,
    )
    quiet = 0.0
    try:
        while True:
            try:
                msg = await sub.next_msg(timeout=NEXT_TIMEOUT)
            except nats.errors.TimeoutError:
                quiet += NEXT_TIMEOUT
                if idle is not None and quiet >= idle:
                    return
                continue
            quiet = 0.0
            yield msg
    finally:
        with contextlib.suppress(nats.errors.Error):
            await sub.unsubscribe()


async def follow(bus: Bus, stream: str, filter_subject: str) -> AsyncGenerator[Decoded, None]:
    """Like `follow_raw`, decoded; undecodable messages are skipped (they are dead-lettered)."""
    async for msg in follow_raw(bus, stream, filter_subject):
        try:
            yield decode_msg(msg)
        except DecodeError:
            continue
