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

Both override private methods of nats-py, so the dependency is pinned to the tested minor
and `PRIVATE_SIGNATURES` records what they must look like. If an installed nats-py differs,
the overrides are not used at all (`DIRECT_DELIVERY` is False, a warning is logged):
`subscribe_direct` falls back to an ordinary callback subscription and headers are parsed
by nats-py. Slower, never wrong.
"""

from __future__ import annotations

import inspect
import logging
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

log = logging.getLogger(__name__)

# The private nats-py methods the overrides below replace or call, as nats-py 2.16 defines
# them (parameter names in order). A change here means the read loop would call our code
# with other arguments: the overrides are then left out.
PRIVATE_SIGNATURES: dict[str, tuple[str, ...]] = {
    "_process_msg": ("self", "sid", "subject", "reply", "data", "headers"),
    "_remove_sub": ("self", "sid", "max_msgs"),
    "_parse_header_lines": ("raw",),
    "_process_headers": ("self", "headers"),
}


def private_signature_drift() -> dict[str, tuple[str, ...] | None]:
    """The private methods whose parameters differ from `PRIVATE_SIGNATURES` in the
    installed nats-py ({name: what it has, None when missing}); empty when all match."""
    drift: dict[str, tuple[str, ...] | None] = {}
    for name, wanted in PRIVATE_SIGNATURES.items():
        method = getattr(_NatsClient, name, None)
        have = None if method is None else tuple(inspect.signature(method).parameters)
        if have != wanted:
            drift[name] = have
    return drift


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
        if not DIRECT_DELIVERY:

            async def deliver(msg: Msg) -> None:
                handler(msg)

            return await self.subscribe(subject, cb=deliver)
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


_DRIFT = private_signature_drift()
# Whether the overrides above are in use (nats-py's private methods are as tested).
DIRECT_DELIVERY = not _DRIFT
if _DRIFT:
    log.warning(
        "nats-py's private methods changed (%s); direct delivery and the fast header parser "
        "are off, nats-py's own paths are used",
        ", ".join(sorted(_DRIFT)),
    )
    for _name in ("_process_msg", "_remove_sub", "_parse_header_lines"):
        delattr(Client, _name)


__all__ = ["DIRECT_DELIVERY", "PRIVATE_SIGNATURES", "Client", "DirectHandler"]
