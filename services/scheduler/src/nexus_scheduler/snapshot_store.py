"""The scheduler's admission snapshot in a JetStream KV bucket, written only by the lease holder.

A snapshot of a busy scheduler (up to 100,000 finished run ids, the configs of the open runs)
can outgrow one NATS message (max_payload, 1 MiB by default), so the encoded snapshot is cut
into chunks under `body.<slot>.<i>`, and a small `head` key says which slot holds the current
one, how many chunks, their SHA-256, the stream sequence and the lease revision of its writer.

- Two slots: a writer fills the slot the head does not name, then moves the head; a reader
  therefore never finds the current snapshot half-overwritten, and the keys do not pile up
  (the bucket keeps one revision per key).
- Fencing: the head moves by compare-and-set on the revision the writer read just before,
  and a writer whose lease revision is older than the head's refuses to write (a deposed
  leader cannot replace the snapshot of the leader after it). Lease revisions grow with
  every write of the lease key, so the current holder's is always the newest -- within one
  lease bucket: the head also records the bucket's creation time, and a head written under
  a lease bucket since deleted and created again is not compared by revision.
- A snapshot is only ever a fold of a prefix of NEXUS_RUNS (`nexus_scheduler.snapshot`), so
  even one that slipped through from a deposed leader is a correct, older starting point;
  the fencing keeps writers from undoing each other's progress. A half-written slot (two
  writers at once) fails its SHA-256 and is ignored.

`load` never raises for a missing, corrupt or foreign snapshot: it logs why and returns None,
and the takeover reads the stream instead.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

import nats.js.errors
from nats.js.kv import KeyValue
from nexus_events.transport.bucket_replicas import follow_replicas
from nexus_events.transport.bus import Bus
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from nexus_scheduler.snapshot import Snapshot, SnapshotInvalid, decode, encode

log = logging.getLogger(__name__)

HEAD_KEY = "head"
Slot = Literal["a", "b"]
# Room left in a chunk message for the KV subject and headers under the server's max_payload.
CHUNK_HEADROOM = 4096


def chunk_key(slot: Slot, index: int) -> str:
    return f"body.{slot}.{index}"


class SnapshotHead(BaseModel):
    """Where the current snapshot is and who wrote it."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    lease_revision: int = Field(ge=0, description="The writer's lease revision when it wrote.")
    lease_epoch: datetime | None = Field(
        None, description="Creation time of the lease bucket that revision is of."
    )
    holder: str = Field(description="The writer's replica id.")
    stream_seq: int = Field(ge=0, description="NEXUS_RUNS sequence the snapshot reflects.")
    slot: Slot = Field(description="The chunk slot holding it.")
    chunks: int = Field(ge=1, description="How many chunks: body.<slot>.0 .. chunks-1.")
    size: int = Field(ge=0, description="Encoded size in bytes.")
    sha256: str = Field(description="SHA-256 (hex) of the encoded snapshot.")


@dataclass(frozen=True)
class Written:
    """What a write stored: the head (None: refused or raced, see the log)."""

    head: SnapshotHead | None
    reason: str = ""


class SnapshotStore:
    def __init__(self, bus: Bus, bucket: str, holder: str, *, replicas: int = 1) -> None:
        self.bus = bus
        self.js = bus.js
        self.bucket = bucket
        self.holder = holder
        # JetStream replicas of the bucket when this store creates it (NEXUS_STREAMS_REPLICAS).
        self.replicas = replicas
        self._kv: KeyValue | None = None

    async def _bucket(self) -> KeyValue:
        if self._kv is None:
            try:
                self._kv = await self.js.key_value(self.bucket)
                await follow_replicas(self.js, f"KV_{self.bucket}", self.replicas)
            except nats.js.errors.BucketNotFoundError:
                # No TTL (unlike the lease's bucket): a snapshot must outlive every leader.
                self._kv = await self.js.create_key_value(
                    bucket=self.bucket, history=1, replicas=self.replicas
                )
        return self._kv

    async def head(self) -> tuple[int | None, SnapshotHead | None]:
        """(KV revision, head) of the current head; (None, None) if there is none, and
        (revision, None) if it is unreadable."""
        kv = await self._bucket()
        try:
            entry = await kv.get(HEAD_KEY)
        except nats.js.errors.KeyNotFoundError:
            return None, None
        try:
            return entry.revision, SnapshotHead.model_validate_json(entry.value or b"")
        except ValidationError as exc:
            log.warning("scheduler snapshot head unreadable: %s", exc)
            return entry.revision, None

    async def load(self) -> Snapshot | None:
        """The current snapshot, or None (none yet, or unusable: logged) -- never raises for
        what the bucket holds."""
        _, head = await self.head()
        if head is None:
            log.info("no usable scheduler snapshot in %s", self.bucket)
            return None
        kv = await self._bucket()
        parts = []
        for index in range(head.chunks):
            try:
                entry = await kv.get(chunk_key(head.slot, index))
            except nats.js.errors.KeyNotFoundError:
                log.warning("scheduler snapshot chunk %s missing: ignored", index)
                return None
            parts.append(entry.value or b"")
        data = b"".join(parts)
        if hashlib.sha256(data).hexdigest() != head.sha256:
            log.warning("scheduler snapshot does not match its checksum (a write raced): ignored")
            return None
        try:
            return await asyncio.to_thread(decode, data)
        except SnapshotInvalid as exc:
            log.warning("scheduler snapshot ignored: %s", exc)
            return None

    async def write(
        self, snapshot: Snapshot, lease_revision: int, lease_epoch: datetime | None = None
    ) -> Written:
        """Store `snapshot` as the current one, unless a newer lease holder wrote the head
        (refused) or the head moved while writing (raced): both are logged and return a
        `Written` without a head. `lease_epoch` (the lease bucket's creation time): a head
        written under another lease bucket (deleted and created again, its revisions
        counting from 1 again) is not compared by revision."""
        data = await asyncio.to_thread(encode, snapshot)
        revision, head = await self.head()
        same_epoch = head is not None and head.lease_epoch == lease_epoch
        if head is not None and same_epoch and head.lease_revision > lease_revision:
            reason = f"the snapshot is a newer leader's (lease {head.lease_revision})"
            log.warning("scheduler snapshot not written (lease %s): %s", lease_revision, reason)
            return Written(None, reason)
        slot: Slot = "b" if head is not None and head.slot == "a" else "a"
        size = max(1, self.bus.nc.max_payload - CHUNK_HEADROOM)
        chunks = [data[i : i + size] for i in range(0, len(data), size)] or [b""]
        kv = await self._bucket()
        for index, chunk in enumerate(chunks):
            await kv.put(chunk_key(slot, index), chunk)
        new = SnapshotHead(
            lease_revision=lease_revision,
            lease_epoch=lease_epoch,
            holder=self.holder,
            stream_seq=snapshot.stream_seq,
            slot=slot,
            chunks=len(chunks),
            size=len(data),
            sha256=hashlib.sha256(data).hexdigest(),
        )
        value = new.model_dump_json().encode()
        try:
            if revision is None:
                await kv.create(HEAD_KEY, value)
            else:
                await kv.update(HEAD_KEY, value, last=revision)
        except nats.js.errors.KeyWrongLastSequenceError:
            reason = "another replica moved the head meanwhile"
            log.warning("scheduler snapshot not written: %s", reason)
            return Written(None, reason)
        return Written(new)
