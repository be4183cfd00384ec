"""The secret guard on the stream itself: a `recorded` event published by hand (``nats pub``),
past the record endpoint, is checked too.

One carrying a secret is filed as a dead letter without its text (reason `secret_blocked`)
and then erased from NEXUS_MEMORY (``STREAM.MSG.DELETE``, which overwrites the stored
message): the secret stays in no stream, no table and no log. The projection skips such an
event on its own, so whichever of the two reads it first, it is never stored.
"""

from __future__ import annotations

import contextlib
import json
import logging

import nats.js.errors
from nexus_events.contract import subjects
from nexus_events.contract.codec import Decoded
from nexus_events.contract.streams import MEMORY
from nexus_events.events import MemoryRecorded
from nexus_events.events.base import Event
from nexus_events.transport.bus import Bus, ConsumerSpec
from nexus_events.transport.dead_letters import build_dead_letter
from nexus_events.transport.fast import Delivered

from nexus_memory.guard import SecretGuard
from nexus_memory.metrics import MemoryMetrics
from nexus_memory.projection import guarded_text
from nexus_memory.writer import BLOCKED

log = logging.getLogger(__name__)


def stream_guard_spec(durable: str, fetch_timeout: float = 1.0) -> ConsumerSpec:
    return ConsumerSpec(
        stream=MEMORY,
        durable=durable,
        filter_subjects=(subjects.memory_events_filter(event="recorded"),),
        batch=100,
        fetch_timeout=fetch_timeout,
    )


class StreamGuard:
    """The stream guard's FastStream handler (`on_recorded`, see `nexus_events.transport.fast`)."""

    def __init__(self, bus: Bus, guard: SecretGuard, metrics: MemoryMetrics) -> None:
        self.bus = bus
        self.guard = guard
        self.metrics = metrics
        self.erased = 0

    async def on_recorded(self, event: Event, delivered: Delivered) -> None:
        if not isinstance(event, MemoryRecorded):
            return
        findings = [f.kind for f in self.guard.scan(guarded_text(event))]
        if findings:
            await self._erase(delivered, event, list(dict.fromkeys(findings)))

    async def _erase(self, d: Decoded, event: MemoryRecorded, findings: list[str]) -> None:
        body = event.model_dump(mode="json", exclude={"text", "tags", "key"})
        body["text"] = f"[withheld: {len(event.text)} characters]"
        seq = d.envelope.stream_seq
        letter = build_dead_letter(
            service=self.bus.source,
            subject=d.envelope.subject,
            data=json.dumps(body).encode(),
            headers={},
            reason=BLOCKED,
            error="secret detected: " + ", ".join(findings) + "; erased from the stream",
            consumer="stream_guard",
            stream=MEMORY,
            stream_seq=seq,
            num_delivered=d.envelope.num_delivered,
        )
        await self.bus.file_dead_letter(letter)  # raises while NATS is away: redelivered
        if seq is not None:
            # NotFound: erased already (a redelivery after the delete).
            with contextlib.suppress(nats.js.errors.NotFoundError):
                await self.bus.js.delete_msg(MEMORY, seq)
        self.erased += 1
        self.metrics.record("blocked")
        log.warning(
            "erased memory event %s at %s:%s: %s",
            event.memory_id,
            MEMORY,
            seq,
            ", ".join(findings),
        )
