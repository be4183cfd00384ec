"""Leadership through a JetStream KV key: one replica acts, the others stand by.

Used through `nexus_events.runtime.leadership` by the scheduler, core, memory and flows: each
service has its own bucket, and the key's value names the holder (``host/pid/…``, or the
scheduler's replica id).

The leader's key expires with the bucket TTL unless renewed, so a crashed leader is replaced
after at most `ttl` seconds; a stopping leader deletes it for an immediate hand-over.

Holding the key once is not enough to act on it: a leader that stalls (a long replay, a
paused process) can lose it to a standby and not know. So the holder fences its side effects
with `still_held()`, which needs no round trip:

- the lease watches its key, so a write by another replica or a delete reaches it as soon as
  the server stores it (the newest revision seen, from the watch or our own writes, wins);
- expiry is not announced by the server, but our key cannot expire sooner than `ttl` after
  our last successful write, so the lease also counts as lost once that long has passed
  without one.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import socket
import time
from datetime import datetime
from typing import Annotated, NamedTuple

import nats.errors
import nats.js.errors
from nats.js import JetStreamContext
from nats.js.kv import KV_DEL, KV_PURGE, KeyValue
from pydantic import Field

from nexus_events.transport.bucket_replicas import follow_replicas

log = logging.getLogger(__name__)

LEADER_KEY = "leader"

# A service's lease TTL setting (NEXUS_LEASE_TTL_SECONDS). Core and memory default to 10 s:
# a crashed holder is replaced within ~1.1 TTL (a standby checks every tenth of it), while
# renewals every third of it ride out a NATS leader election (a few seconds).
LeaseTtl = Annotated[
    float,
    Field(gt=0, le=300, description="Seconds before a dead projecting replica is replaced."),
]


class LeaseTerm(NamedTuple):
    """A holder's fence token: the KV revision of its last write of the key (it grows with
    every write, so a later holder's is greater) and the bucket's creation time (revisions
    count from 1 again in a recreated bucket: only tokens of one epoch compare)."""

    revision: int
    epoch: datetime | None


def default_holder() -> str:
    """``<host>/<pid>/<random>``: says where the holder runs; the random part keeps two
    instances in one process (tests) apart, and a restarted process from reclaiming a key a
    dead one left (it waits for the key to expire instead, as any other replica does)."""
    return f"{socket.gethostname()}/{os.getpid()}/{secrets.token_hex(3)}"


class Lease:
    """One replica's view of the lease key in `bucket` (created on first use, with `ttl` as
    the bucket's max age and `replicas` JetStream replicas; an existing bucket is used as it
    is). `changed` is set whenever the watch sees the key written or deleted, so a standby
    can try at once instead of at its next round."""

    def __init__(
        self, js: JetStreamContext, bucket: str, holder: str, ttl: float, *, replicas: int = 1
    ) -> None:
        self.js = js
        self.bucket = bucket
        self.holder = holder
        self.ttl = ttl
        self.replicas = replicas
        self.changed = asyncio.Event()
        self._kv: KeyValue | None = None
        self._revision: int | None = None
        # Creation time of the lease bucket (None until first used).
        self.epoch: datetime | None = None
        # The key as last known: the newest revision seen and who held it (None: deleted).
        self._seen_revision = 0
        self._owner: bytes | None = None
        # Monotonic time at which our last successful write was sent.
        self._written_at: float | None = None
        self._watcher: KeyValue.KeyWatcher | None = None
        self._watch_task: asyncio.Task[None] | None = None

    @property
    def held(self) -> bool:
        return self._revision is not None

    @property
    def owner(self) -> str | None:
        """Who holds the key as far as this replica has seen (None: free, or not known yet)."""
        return None if self._owner is None else self._owner.decode(errors="replace")

    @property
    def revision(self) -> int | None:
        """The KV revision of our last write of the key (None: not held). It grows with every
        write of the key, so a later holder's revision is always greater."""
        return self._revision

    async def _bucket(self) -> KeyValue:
        if self._kv is None:
            try:
                kv = await self.js.key_value(self.bucket)
                await follow_replicas(self.js, f"KV_{self.bucket}", self.replicas)
            except nats.js.errors.BucketNotFoundError:
                kv = await self.js.create_key_value(
                    bucket=self.bucket,
                    ttl=self.ttl,
                    history=1,
                    replicas=self.replicas,
                    description="Leader lease: the key expires unless its holder renews it.",
                )
            # Revisions count from 1 again in a recreated bucket: the creation time tells
            # whose revision is comparable with whose (`SnapshotStore.write`).
            self.epoch = (await self.js.stream_info(f"KV_{self.bucket}")).created
            self._watcher = await kv.watch(LEADER_KEY)
            self._watch_task = asyncio.create_task(self._follow(self._watcher), name="lease:watch")
            self._kv = kv
        return self._kv

    async def _follow(self, watcher: KeyValue.KeyWatcher) -> None:
        async for entry in watcher:
            if entry is None or entry.revision is None:
                continue  # the marker after the initial value
            deleted = entry.operation in (KV_DEL, KV_PURGE)
            self._see(entry.revision, None if deleted else entry.value)

    def _see(self, revision: int, owner: bytes | None) -> None:
        # Our write's reply and the watch can arrive in either order: the newest one counts.
        if revision > self._seen_revision:
            self._seen_revision, self._owner = revision, owner
            self.changed.set()

    def _wrote(self, revision: int, sent: float) -> None:
        self._revision, self._written_at = revision, sent
        self._see(revision, self.holder.encode())

    async def acquire(self) -> bool:
        """Take the lease if free (or already ours); return whether we hold it."""
        kv = await self._bucket()
        sent = time.monotonic()
        try:
            revision = await kv.create(LEADER_KEY, self.holder.encode())
        except nats.js.errors.KeyWrongLastSequenceError:
            pass
        else:
            self._wrote(revision, sent)
            # DEBUG: the service says it leads, once, when it has taken over.
            log.debug("lease acquired", extra={"holder": self.holder, "bucket": self.bucket})
            return True
        try:
            entry = await kv.get(LEADER_KEY)
        except nats.js.errors.KeyNotFoundError:
            return False
        if entry.revision is not None:
            self._see(entry.revision, entry.value)  # who holds it, even before the watch says
        if entry.value == self.holder.encode() and entry.revision is not None:
            # Our own lease from before a restart: take it back.
            return await self._update(kv, entry.revision)
        return False

    async def renew(self) -> bool:
        """Extend the lease; False means it was lost (expired and taken, or deleted)."""
        if self._revision is None:
            return False
        return await self._update(await self._bucket(), self._revision)

    async def still_held(self) -> bool:
        """Whether the key is ours as far as the server has told us, and has been written by
        us within `ttl` (so it cannot have expired). False also forgets the lease locally."""
        if self._revision is None:
            return False
        fresh = self._written_at is not None and time.monotonic() - self._written_at < self.ttl
        if fresh and self._owner == self.holder.encode():
            return True
        # A warning, not an error: leader changes happen; the service steps down.
        log.warning("the lease %s is no longer ours", self.bucket, extra={"holder": self.holder})
        self._revision = None
        return False

    async def _update(self, kv: KeyValue, revision: int) -> bool:
        sent = time.monotonic()
        try:
            new_revision = await kv.update(LEADER_KEY, self.holder.encode(), last=revision)
        except (nats.js.errors.KeyWrongLastSequenceError, nats.js.errors.KeyNotFoundError):
            self._revision = None
            return False
        self._wrote(new_revision, sent)
        return True

    async def release(self) -> None:
        """Hand the lease over at once (delete the key) and stop watching it."""
        if self._revision is not None:
            revision, self._revision = self._revision, None
            try:
                await (await self._bucket()).delete(LEADER_KEY, last=revision)
            except (nats.errors.Error, nats.js.errors.Error) as exc:
                log.warning("lease release failed (it will expire): %s", exc)
        if self._watcher is not None:
            with contextlib.suppress(nats.errors.Error, nats.js.errors.Error):
                await self._watcher.stop()  # type: ignore[no-untyped-call]  # unannotated in nats-py
        if self._watch_task is not None:
            self._watch_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._watch_task
