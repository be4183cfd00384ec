"""nats-py's client with a cheaper receive path for the messages Nexus reads in bulk.

Two costs of nats-py 2.16 showed up first in a replay profile:

- Header parsing. nats-py checks every header name for whitespace with a generator over its
  characters (``any(c.isspace() for c in key)``); with the five to seven headers of a Nexus
  envelope that cost more than decoding the event. `_parse_header_lines` returns exactly what
  nats-py's does (a test compares them on awkward inputs) but checks a name with one
  ``str.split``.
- Delivery. Every message goes through an awaited header coroutine, JetStream bookkeeping
  meant for push consumers, the subscription's queue and a task that awaits the callback.
  A subscription made with `subscribe_direct` skips all of that: the read loop builds the
  `Msg` and calls a plain function with it. Only pull readers use it: their messages need
  none of that bookkeeping, and their handler just buffers the message.
"""

from __future__ import annotations

from collections.abc import Callable

from nats.aio.client import NATS_HDR_LINE_SIZE
from nats.aio.client import Client as _NatsClient
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription

_CRLF = b"\r\n"
# Header blocks start "NATS/1.0\r\n"; a space instead of CR starts an inline status line.
_PLAIN_HEADERS_AT = NATS_HDR_LINE_SIZE + len(_CRLF)
_CR = _CRLF[0]

DirectHandler = Callable[[Msg], None]


async def _unused_callback(msg: Msg) -> None:
    """The callback nats-py keeps for a direct subscription; direct delivery never calls it."""


class Client(_NatsClient):
    """`nats.aio.client.Client` with a cheaper header parser and synchronous delivery for
    subscriptions made with `subscribe_direct`."""

    def __init__(self) -> None:
        super().__init__()
        self._direct: dict[int, DirectHandler] = {}

    async def subscribe_direct(self, subject: str, handler: DirectHandler) -> Subscription:
        """Subscribe `subject` with `handler` called in the read loop for every message.

        `handler` must be quick and must not raise (an exception is passed to the client's
        error callback and the message is lost to it); it must not block or await. Unsubscribe
        with the returned subscription as usual.
        """
        sub = await self.subscribe(subject, cb=_unused_callback)
        self._direct[sub._id] = handler
        return sub

    def _remove_sub(self, sid: int, max_msgs: int = 0) -> None:
        self._direct.pop(sid, None)
        super()._remove_sub(sid, max_msgs)

    async def _process_msg(
        self, sid: int, subject: bytes, reply: bytes, data: bytes, headers: bytes
    ) -> None:
        handler = self._direct.get(sid)
        if handler is None:
            await super()._process_msg(sid, subject, reply, data, headers)
            return
        self.stats["in_msgs"] += 1
        self.stats["in_bytes"] += len(data)
        if not headers:
            hdr = None
        elif headers[NATS_HDR_LINE_SIZE] == _CR:
            hdr = self._parse_header_lines(headers[_PLAIN_HEADERS_AT:]) or None
        else:  # a status line (404, 408, 409, heartbeats...): rare, nats-py's own parsing
            hdr = await self._process_headers(headers)
        msg = Msg(
            _client=self,
            subject=subject.decode(),
            reply=reply.decode(),
            data=data,
            headers=hdr,
            _sid=sid,
        )
        try:
            handler(msg)
        except Exception as exc:  # noqa: BLE001 - the read loop must go on; report it
            await self._error_cb(exc)

    @staticmethod
    def _parse_header_lines(raw: bytes) -> dict[str, str]:
        out: dict[str, str] = {}
        for line in raw.split(_CRLF):
            name, sep, value = line.partition(b":")
            if not sep:
                continue
            try:
                key = name.strip().decode("ascii")
            except UnicodeDecodeError:
                continue  # nats-py drops names that are not ASCII
            # A stripped name with whitespace inside splits into several parts (nats-py: skip).
            if key and len(key.split()) != 1:
                continue
            out[key] = value.strip().decode("utf-8", "replace")
        return out


__all__ = ["Client", "DirectHandler"]
