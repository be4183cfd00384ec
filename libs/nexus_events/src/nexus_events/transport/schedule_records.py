"""Schedules as the CLI and the console read them: NEXUS_SCHEDULES folded like the scheduler
folds it (last `defined` per id unless `removed` after it; fires and misses), from bounded
replays; and pausing or resuming one, as `nexus schedule pause|resume` does."""

from __future__ import annotations

import uuid
from collections import deque
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from nats.aio.msg import Msg

from nexus_events.contract import subjects
from nexus_events.contract.codec import Decoded
from nexus_events.contract.streams import SCHEDULES
from nexus_events.contract.subjects import Family
from nexus_events.errors import DecodeError
from nexus_events.events import (
    Event,
    ScheduleDefined,
    ScheduleFired,
    ScheduleMissed,
    ScheduleRemoved,
)
from nexus_events.transport.bus import Bus, decode_msg

# `nexus.schedule.v1.`: the family has no filter helper of its own.
_PREFIX = subjects.family_filter(Family.SCHEDULE).removesuffix(">")


def schedule_filter(schedule_id: str | None = None, event: str | None = None) -> str:
    return f"{_PREFIX}{schedule_id or '*'}.{event or '*'}"


@dataclass
class ScheduleRecord:
    schedule_id: str
    definition: ScheduleDefined
    defined_at: datetime | None  # the first `defined` since the last removal, as the scheduler
    fires: deque[dict[str, Any]] = field(default_factory=lambda: deque(maxlen=10))
    misses: deque[dict[str, Any]] = field(default_factory=lambda: deque(maxlen=10))
    fire_count: int = 0
    missed_count: int = 0

    def as_dict(self, recent: int = 1, *, counts: bool = True) -> dict[str, Any]:
        """`counts` only from a full read of the schedule (`ls` reads the last fire only)."""
        out: dict[str, Any] = {
            "schedule_id": self.schedule_id,
            "definition": self.definition.model_dump(mode="json"),
            "defined_at": self.defined_at.isoformat() if self.defined_at else None,
            "fires": list(self.fires)[-recent:] if recent else [],
            "misses": list(self.misses)[-recent:] if recent else [],
        }
        if counts:
            out |= {"fire_count": self.fire_count, "missed_count": self.missed_count}
        return out


class _Fold:
    def __init__(self) -> None:
        self.records: dict[str, ScheduleRecord] = {}

    def apply(self, d: Decoded) -> None:
        sid = d.address.ids.get("schedule_id")
        if sid is None:
            return
        event, at = d.event, d.envelope.timestamp
        if isinstance(event, ScheduleDefined):
            old = self.records.get(sid)
            if old is None:
                self.records[sid] = ScheduleRecord(sid, event, at)
            else:  # a redefinition (pause, resume, --replace) keeps the history
                old.definition = event
        elif isinstance(event, ScheduleRemoved):
            self.records.pop(sid, None)
        elif (rec := self.records.get(sid)) is not None:
            if isinstance(event, ScheduleFired):
                rec.fire_count += 1
                rec.fires.append(
                    {"scheduled_for": event.scheduled_for.isoformat(), "run_id": event.run_id}
                )
            elif isinstance(event, ScheduleMissed):
                rec.missed_count += 1
                rec.misses.append(
                    {"scheduled_for": event.scheduled_for.isoformat(), "reason": event.reason}
                )


async def read_schedule(bus: Bus, schedule_id: str) -> ScheduleRecord | None:
    """One schedule with its last fires and misses: every event of its id, to the stream's
    end as of the call."""
    fold = _Fold()
    async for d in bus.replay(SCHEDULES, filter_subject=schedule_filter(schedule_id, None)):
        fold.apply(d)
    return fold.records.get(schedule_id)


async def read_schedules(bus: Bus) -> list[ScheduleRecord]:
    """Every live schedule by id, with only its last fire and last miss: those come from a
    last-per-subject read, so a minutely cron's month of fires is not replayed."""
    fold = _Fold()
    filters = [schedule_filter(None, "defined"), schedule_filter(None, "removed")]
    async for d in _decoded(bus.replay_raw(SCHEDULES, filter_subjects=filters)):
        fold.apply(d)
    for event in ("fired", "missed"):
        last = bus.replay_raw(
            SCHEDULES, filter_subject=schedule_filter(None, event), last_per_subject=True
        )
        async for d in _decoded(last):
            rec = fold.records.get(d.address.ids.get("schedule_id") or "")
            # A fire from before a removal and re-definition is not this schedule's.
            at = d.envelope.timestamp
            if rec is None or (rec.defined_at and at and at < rec.defined_at):
                continue
            fold.apply(d)
    return sorted(fold.records.values(), key=lambda r: r.schedule_id)


async def _decoded(msgs: AsyncIterator[Msg]) -> AsyncIterator[Decoded]:
    async for msg in msgs:
        try:
            yield decode_msg(msg)
        except DecodeError:  # the scheduler dead-letters it; it defines nothing
            continue


async def define(bus: Bus, schedule_id: str, event: Event, msg_prefix: str) -> None:
    """Publish `defined` or `removed` for the schedule."""
    subject = subjects.schedule_event(schedule_id, event.event_name)
    # Its own msg id: the derived one (subject + body) would drop a resume that re-publishes
    # the very definition an earlier `add` did, as a duplicate.
    msg_id = f"{msg_prefix}:schedule:{schedule_id}:{uuid.uuid4().hex}"
    await bus.publish(subject, event, msg_id=msg_id)


def status_of(rec: ScheduleRecord) -> str:
    """paused, done (a one-shot that fired: the scheduler keeps nothing more of it), active."""
    if not rec.definition.enabled:
        return "paused"
    return "done" if rec.definition.at is not None and rec.fires else "active"


async def set_enabled(bus: Bus, rec: ScheduleRecord, enabled: bool, msg_prefix: str) -> bool:
    """Pause (enabled False) or resume the schedule; False if it already was so."""
    if rec.definition.enabled == enabled:
        return False
    # Re-defining it keeps its fire history: the scheduler folds the new `defined`.
    await define(
        bus, rec.schedule_id, rec.definition.model_copy(update={"enabled": enabled}), msg_prefix
    )
    return True
