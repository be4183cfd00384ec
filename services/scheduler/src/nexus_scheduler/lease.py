"""Leadership through a JetStream KV key: one scheduler acts, the others stand by.

The leader's key expires with the bucket TTL unless renewed, so a crashed leader is replaced
after at most `ttl` seconds; a stopping leader deletes it for an immediate hand-over.

Holding the key once is not enough to act on it: a leader that stalls (a long replay, a
paused process) can lose it to a standby and not know. So the holder fences its side effects
with `still_held()`, which asks the server whether the key is still at the revision this
holder last wrote. Every lease operation goes through one lock, so a check never races the
renewal that moves the revision.
"""

from __future__ import annotations

import asyncio
import logging

import nats.errors
import nats.js.errors
from nats.js import JetStreamContext
from nats.js.kv import KeyValue

log = logging.getLogger(__name__)

LEADER_KEY = "leader"


class Lease:
    def __init__(self, js: JetStreamContext, bucket: str, holder: str, ttl: float) -> None:
        self.js = js
        self.bucket = bucket
        self.holder = holder
        self.ttl = ttl
        self._kv: KeyValue | None = None
        self._revision: int | None = None
        self._lock = asyncio.Lock()

    @property
    def held(self) -> bool:
        return self._revision is not None

    async def _bucket(self) -> KeyValue:
        if self._kv is None:
            try:
                self._kv = await self.js.key_value(self.bucket)
            except nats.js.errors.BucketNotFoundError:
                self._kv = await self.js.create_key_value(
                    bucket=self.bucket, ttl=self.ttl, history=1
                )
        return self._kv

    async def acquire(self) -> bool:
        """Take the lease if free (or already ours); return whether we hold it."""
        async with self._lock:
            return await self._acquire()

    async def _acquire(self) -> bool:
        kv = await self._bucket()
        try:
            self._revision = await kv.create(LEADER_KEY, self.holder.encode())
        except nats.js.errors.KeyWrongLastSequenceError:
            pass
        else:
            log.info("lease acquired", extra={"holder": self.holder})
            return True
        try:
            entry = await kv.get(LEADER_KEY)
        except nats.js.errors.KeyNotFoundError:
            return False
        if entry.value == self.holder.encode() and entry.revision is not None:
            # Our own lease from before a restart: take it back.
            return await self._update(kv, entry.revision)
        return False

    async def renew(self) -> bool:
        """Extend the lease; False means it was lost (expired and taken, or deleted)."""
        async with self._lock:
            if self._revision is None:
                return False
            return await self._update(await self._bucket(), self._revision)

    async def still_held(self) -> bool:
        """Whether the key is still ours at the revision we last wrote (a server round trip).

        False also forgets the lease locally. NATS errors count as not held: a leader that
        cannot tell must not act.
        """
        async with self._lock:
            if self._revision is None:
                return False
            try:
                entry = await (await self._bucket()).get(LEADER_KEY)
            except nats.js.errors.KeyNotFoundError:
                entry = None
            except (nats.errors.Error, nats.js.errors.Error) as exc:
                log.warning("cannot check the scheduler lease: %s", exc)
                return False
            if (
                entry is None
                or entry.revision != self._revision
                or entry.value != self.holder.encode()
            ):
                log.error("the scheduler lease is no longer ours", extra={"holder": self.holder})
                self._revision = None
                return False
            return True

    async def _update(self, kv: KeyValue, revision: int) -> bool:
        try:
            self._revision = await kv.update(LEADER_KEY, self.holder.encode(), last=revision)
        except (nats.js.errors.KeyWrongLastSequenceError, nats.js.errors.KeyNotFoundError):
            self._revision = None
            return False
        return True

    async def release(self) -> None:
        async with self._lock:
            await self._release()

    async def _release(self) -> None:
        if self._revision is None:
            return
        revision, self._revision = self._revision, None
        try:
            await (await self._bucket()).delete(LEADER_KEY, last=revision)
        except (nats.errors.Error, nats.js.errors.Error) as exc:
            log.warning("lease release failed (it will expire): %s", exc)
