"""Writing memory: every text through the secret guard, then an event on NEXUS_MEMORY.

`MemoryWriter.record` is the one way a memory is written (record requests, the `remember`
tool, extraction, consolidation): a blocked text is never published; it is filed as a dead
letter whose body keeps the request without the text, so the secret reaches no stream.
`AccessTracker` batches search hits into `accessed` events.
"""

from __future__ import annotations

import contextlib
import json
import logging
import uuid
from collections import Counter, defaultdict
from collections.abc import AsyncGenerator, Iterable
from typing import Any, cast

import asyncpg
from nexus_events.contract import subjects
from nexus_events.contract.codec import Decoded
from nexus_events.contract.streams import MEMORY
from nexus_events.errors import BusError
from nexus_events.events import (
    MemoryAccessed,
    MemoryForgetReply,
    MemoryForgetRequest,
    MemoryForgotten,
    MemoryItem,
    MemoryRecorded,
    MemoryRecordReply,
    MemoryRecordRequest,
)
from nexus_events.runtime.periodic import PeriodicTask
from nexus_events.transport.bus import Bus
from nexus_events.transport.dead_letters import build_dead_letter
from nexus_events.transport.micro import QueryError
from nexus_events.transport.projection import CHECKPOINT_TABLE, quote_ident

from nexus_memory.guard import SecretGuard
from nexus_memory.metrics import MemoryMetrics
from nexus_memory.projection import MEMORY_SCHEMA, guarded_text

log = logging.getLogger(__name__)

BLOCKED = "secret_blocked"


def new_memory_id() -> str:
    return f"mem-{uuid.uuid4().hex[:20]}"


class SecretBlocked(QueryError):  # noqa: N818 - reads as a fact
    """A write carried a secret and the policy is block: nothing was stored (422)."""

    def __init__(self, findings: Iterable[str]) -> None:
        self.findings = tuple(findings)
        super().__init__(
            422,
            "blocked: the memory contains a secret ("
            + ", ".join(self.findings)
            + "); nothing was stored",
        )


class MemoryWriter:
    def __init__(
        self,
        bus: Bus,
        pool: asyncpg.Pool[Any],
        guard: SecretGuard,
        metrics: MemoryMetrics,
        *,
        schema: str = MEMORY_SCHEMA,
    ) -> None:
        self.bus = bus
        self.pool = pool
        self.guard = guard
        self.metrics = metrics
        self.table = f"{quote_ident(schema)}.memories"
        self.checkpoints = f"{quote_ident(schema)}.{CHECKPOINT_TABLE}"

    async def record(
        self, request: MemoryRecordRequest, *, msg_id: str | None = None
    ) -> MemoryRecordReply:
        """Guard, then publish `recorded`; raise `SecretBlocked` under the block policy.

        Idempotent for a given `memory_id`: the event id is derived from it, so a retry within
        the stream's duplicate window stores one event, and the projection keeps the first.
        """
        memory_id = request.memory_id or new_memory_id()
        text = self.guard.check(request.text)
        tags = [self.guard.check(t) for t in request.tags]
        key = self.guard.check(request.key) if request.key is not None else None
        verdicts = [text, *tags, *([key] if key else [])]
        findings = list(dict.fromkeys(f for v in verdicts for f in v.findings))
        if any(v.blocked for v in verdicts):
            self.metrics.record("blocked")
            await self._dead_letter(request, memory_id, findings)
            raise SecretBlocked(findings)
        event = MemoryRecorded(
            memory_id=memory_id,
            text=text.text,
            kind=request.kind,
            tags=[t.text for t in tags],
            source_run_id=request.source_run_id,
            key=key.text if key else None,
            supersedes=request.supersedes,
            source=request.source,
            redacted=bool(findings),
        )
        await self.bus.publish(
            subjects.memory_event(request.scope, "recorded"),
            event,
            msg_id=msg_id or f"memory-recorded-{memory_id}",
        )
        self.metrics.record("redacted" if findings else "recorded")
        return MemoryRecordReply(
            memory_id=memory_id, scope=request.scope, redacted=bool(findings), findings=findings
        )

    async def _dead_letter(
        self, request: MemoryRecordRequest, memory_id: str, findings: list[str]
    ) -> None:
        # The letter says what was refused and why, never the secret: the text is replaced by
        # its length and the other strings are dropped.
        body = request.model_dump(mode="json", exclude={"text", "tags", "key"})
        body |= {"memory_id": memory_id, "text": f"[withheld: {len(request.text)} characters]"}
        letter = build_dead_letter(
            service=self.bus.source,
            subject=subjects.memory_event(request.scope, "recorded"),
            data=json.dumps(body).encode(),
            headers={},
            reason=BLOCKED,
            error="secret detected: " + ", ".join(findings),
            consumer="record",
            stream=None,
            stream_seq=None,
            num_delivered=0,
        )
        try:
            await self.bus.file_dead_letter(letter)
        except BusError:
            log.exception("could not file the dead letter of a blocked memory %s", memory_id)

    async def forget(self, request: MemoryForgetRequest) -> MemoryForgetReply:
        """Publish `forgotten` in the memory's scope; 404 if no memory has that id.

        A memory recorded a moment ago may not be projected yet (`add` then `forget` at
        once, or a projection held back under load): what the projection has not applied
        is read from NEXUS_MEMORY itself, so the answer does not depend on the projection's
        lag. The `forgotten` event lands after the `recorded` one in the stream, so the
        projection applies them in that order whenever it gets there.
        """
        applied, scope = await self._projected_scope(request.memory_id)
        if scope is None:
            scope = await self._scope_in_stream(request.memory_id, after=applied)
        if scope is None:
            raise QueryError(404, f"no memory {request.memory_id!r}")
        await self.bus.publish(
            subjects.memory_event(scope, "forgotten"),
            MemoryForgotten(memory_id=request.memory_id, reason=request.reason),
        )
        return MemoryForgetReply(memory_id=request.memory_id, scope=scope)

    async def _projected_scope(self, memory_id: str) -> tuple[int, str | None]:
        """The projection's checkpoint and the memory's scope if it is projected, read in one
        statement (one snapshot): every `recorded` event up to the checkpoint is in the row
        set read, so only the stream past it remains to be looked at."""
        row = await self.pool.fetchrow(
            f"SELECT (SELECT last_seq FROM {self.checkpoints} WHERE stream = $2) AS applied,"
            f" (SELECT scope FROM {self.table} WHERE memory_id = $1) AS scope",
            memory_id,
            MEMORY,
        )
        assert row is not None  # a SELECT of two scalar subqueries returns one row
        scope = row["scope"]
        return int(row["applied"] or 0), None if scope is None else str(scope)

    async def _scope_in_stream(self, memory_id: str, *, after: int) -> str | None:
        """The scope of the first `recorded` event for `memory_id` past sequence `after`
        that the projection will keep (one carrying a secret it never projects)."""
        replay = cast(
            AsyncGenerator[Decoded, None],
            self.bus.replay(
                MEMORY,
                start_seq=after + 1,
                filter_subject=subjects.memory_events_filter(event="recorded"),
            ),
        )
        async with contextlib.aclosing(replay) as events:
            async for decoded in events:
                event = decoded.event
                if (
                    isinstance(event, MemoryRecorded)
                    and event.memory_id == memory_id
                    and not self.guard.has_secret(guarded_text(event))
                ):
                    return decoded.address.ids["scope"]
        return None


class AccessTracker:
    """Counts the memories searches return; `flush` publishes them as `accessed` events, one
    per scope. Runs a flush every `interval` seconds once started, and a last one on stop."""

    def __init__(self, bus: Bus, interval: float) -> None:
        self.bus = bus
        self.interval = interval
        self._counts: dict[str, Counter[str]] = defaultdict(Counter)
        # A flush in hand is cut on stop; `stop` flushes once more anyway.
        self._flushes = PeriodicTask(
            self.flush,
            interval,
            name="memory access flush",
            first="after_interval",
            stop_grace=0,
            logger=log,
        )

    def note(self, items: Iterable[MemoryItem]) -> None:
        for item in items:
            if item.scope is not None:
                self._counts[item.scope][item.memory_id] += 1

    async def flush(self) -> None:
        counts, self._counts = self._counts, defaultdict(Counter)
        for scope, c in counts.items():
            try:
                await self.bus.publish(
                    subjects.memory_event(scope, "accessed"),
                    MemoryAccessed(counts=dict(c)),
                    msg_id=f"memory-accessed-{uuid.uuid4().hex}",
                )
            except BusError as exc:  # counts are a ranking hint: losing one batch is harmless
                log.warning("could not publish memory access counts for %s: %s", scope, exc)

    async def start(self) -> None:
        self._flushes.start()

    async def stop(self) -> None:
        await self._flushes.stop()
        await self.flush()
