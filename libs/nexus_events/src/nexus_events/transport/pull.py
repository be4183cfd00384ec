"""A fast reader of a JetStream pull consumer: one inbox subscription, a buffer, pull requests.

nats-py's `fetch` waits for each message of a batch with its own future and timer; on a
replay that bookkeeping, not the server, capped reading at ~15,000 msg/s. `PullReader`
instead lets the subscription's callback append every delivered message to a buffer and hands
out what is buffered, about four times faster.

At most one pull request is open at a time, so the order of deliveries is the consumer's
order. A request first asks with ``no_wait`` (whatever is available, at once); only when that
finds nothing does the next one linger (``expires``) until a message arrives. After handing
out a batch while the server still reports messages pending, the next request goes out at
once, so the server streams the following batch while the caller works on this one.

Each request has its own reply subject (``<inbox>.<n>``): the server's status replies (404 no
messages, 408 expired, 409 consumer gone, ...) arrive there, so a late status of an earlier
request is never mistaken for the current one. A request the server never closes (the
connection dropped it) raises `PullStalled` once it is overdue; callers reposition.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections import deque

import nats.errors
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription

from nexus_events.contract.codec import JsMeta
from nexus_events.errors import BusError, PullStalled
from nexus_events.transport.natsclient import Client as DirectClient

# Server status codes on a pull request's reply subject.
_HEARTBEAT = "100"
_DONE = ("404", "408")  # no messages / request expired: the request is over, nothing wrong
# A request is overdue when nothing arrived for this long past its expiry.
_GRACE = 2.0
# Lingering requests expire a little before the caller's wait, so their 408 is normally
# in before the next fetch; the server refuses expiries under 1 ms.
_MIN_EXPIRES = 0.01


class _Request:
    __slots__ = ("batch", "expires", "last_activity", "linger", "remaining", "reply")

    def __init__(self, reply: str, batch: int, linger: bool, expires: float | None) -> None:
        self.reply = reply
        self.batch = batch
        self.remaining = batch
        self.linger = linger
        self.expires = expires
        self.last_activity = time.monotonic()

    def overdue(self, now: float) -> bool:
        return now - self.last_activity > (self.expires or 0.0) + _GRACE


class PullReader:
    """Reads one durable or named pull consumer. Not safe for concurrent `fetch` calls."""

    def __init__(self, nc: Client, stream: str, consumer: str) -> None:
        self._nc = nc
        self._next_subject = f"$JS.API.CONSUMER.MSG.NEXT.{stream}.{consumer}"
        self._inbox = nc.new_inbox()
        self._sub: Subscription | None = None
        self._buffer: deque[Msg] = deque()
        self._request: _Request | None = None
        self._requests = 0
        self._failure: str | None = None
        self._linger = False  # the last request found nothing: the next one waits
        self._arrived = asyncio.Event()

    async def start(self) -> PullReader:
        subject = f"{self._inbox}.*"
        if isinstance(self._nc, DirectClient):
            self._sub = await self._nc.subscribe_direct(subject, self._on_msg)
        else:  # a plain nats-py client: the same handler behind its callback task
            self._sub = await self._nc.subscribe(subject, cb=self._on_msg_async)
        return self

    @property
    def caught_up(self) -> bool:
        """Whether the server's last answer to a pull request was "nothing available": the
        consumer is at the end of what it may deliver, and the server is there to say so."""
        return self._linger

    async def close(self) -> None:
        """Stop listening. Messages of an open request still in flight are dropped: with an
        ack-less consumer the caller repositions from its own checkpoint before reading on."""
        if self._sub is not None:
            with contextlib.suppress(nats.errors.Error):
                await self._sub.unsubscribe()
            self._sub = None

    async def __aenter__(self) -> PullReader:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def fetch(self, batch: int, wait: float) -> list[Msg]:
        """Up to `batch` messages in consumer order; [] if none came within `wait` seconds.

        Raises `PullStalled` if the consumer refused or lost the request.
        """
        if self._sub is None:
            raise BusError("PullReader.fetch before start")
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait
        while True:
            if self._failure is not None:
                raise PullStalled(self._failure)
            request = self._request
            if request is None:
                if self._buffer:
                    return await self._take(batch)
                await self._send(batch, wait)
            elif self._buffer and (request.linger or len(self._buffer) >= batch):
                return await self._take(batch)
            left = deadline - loop.time()
            if left <= 0:
                # Checked only after waiting, so callbacks have had their turn to record
                # activity: a busy caller does not make a healthy request look lost.
                if request is not None and not self._buffer and request.overdue(time.monotonic()):
                    self._request = None
                    raise PullStalled(f"pull request on {self._next_subject} was never answered")
                return await self._take(batch)
            self._arrived.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._arrived.wait(), left)

    async def _take(self, batch: int) -> list[Msg]:
        buffer = self._buffer
        n = min(batch, len(buffer))
        msgs = [buffer.popleft() for _ in range(n)]
        if msgs and self._request is None and not buffer and _pending(msgs[-1]) > 0:
            # Ask for the next batch now so it streams in while the caller applies this one.
            await self._send(batch, None)
        return msgs

    async def _send(self, batch: int, wait: float | None) -> None:
        self._requests += 1
        reply = f"{self._inbox}.{self._requests}"
        body: dict[str, object] = {"batch": batch}
        expires: float | None = None
        if self._linger and wait is not None:
            expires = max(wait * 0.9, _MIN_EXPIRES)
            body["expires"] = int(expires * 1e9)
        else:
            body["no_wait"] = True
        self._request = _Request(reply, batch, "expires" in body, expires)
        await self._nc.publish(self._next_subject, json.dumps(body).encode(), reply=reply)

    async def _on_msg_async(self, msg: Msg) -> None:
        self._on_msg(msg)

    def _on_msg(self, msg: Msg) -> None:
        request = self._request
        if msg.reply:  # a stream message: it belongs to the open request (one at a time)
            self._buffer.append(msg)
            self._linger = False
            if request is not None:
                request.remaining -= 1
                request.last_activity = time.monotonic()
                if request.remaining <= 0:
                    self._request = None
            self._arrived.set()
            return
        if request is None or msg.subject != request.reply:
            return  # a late status of an earlier request
        headers = msg.headers or {}
        status = headers.get("Status", "")
        if status == _HEARTBEAT:
            request.last_activity = time.monotonic()
            return
        self._request = None
        if status in _DONE:
            # Nothing (more) available now: if nothing came at all, the next request waits.
            self._linger = request.remaining == request.batch
        else:
            # 409: consumer deleted or request refused; 503: no consumer answers this subject.
            description = headers.get("Description", "").split("\n", 1)[0].strip()
            detail = description or ("no responders" if status == "503" else "")
            self._failure = f"pull on {self._next_subject}: {status} {detail}".strip()
        self._arrived.set()


def _pending(msg: Msg) -> int:
    meta = JsMeta.from_reply(msg.reply)
    return meta.num_pending if meta is not None else 0


__all__ = ["PullReader", "PullStalled"]
