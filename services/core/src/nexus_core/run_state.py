"""The `agent_runs` row of one run and the pure `evolve` that folds a run event into it.

Every field is a function of the SET of (stream sequence, event) pairs seen, not of the order
they were applied in: applying a run's events in any order, with duplicates and redeliveries,
gives the row that applying them in stream order gives. That is how each field gets there:

- status: the status-implying event with the greatest `status_key` wins. Keys rank statuses
  as `runstate` does: a terminal event beats everything and the earliest terminal (lowest
  sequence) wins, so terminal states are final; live statuses only move forwards; the
  approval events toggle running/awaiting_approval by sequence (latest wins), and a heartbeat
  or turn never toggles back. In stream order this equals folding `runstate.next_status`.
- who/what (agent, task, origin, input, requested_by): from the earliest `requested`, else the
  earliest `prepared`. Config (catalog revisions): earliest `prepared`.
- runtime handle: latest `dispatched`; attempt: the highest seen; queue position: latest `queued`.
- phase timestamps: the first (minimum) JetStream timestamp of each phase; last_event_at the max.
- tokens and cost: per turn (keyed by turn number, so a duplicate turn counts once), summed; the
  winning terminal event's totals replace the sums when it carries any.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from nexus_events.events import (
    Event,
    RunCompleted,
    RunDispatched,
    RunPrepared,
    RunQueued,
    RunRequested,
    RunTurn,
    TerminalEvent,
)
from nexus_events.runstate import RunStatus, is_terminal, next_status

# Live progress rank of each status (as in runstate); terminal statuses sit above all.
_RANK = {
    RunStatus.REQUESTED: 0,
    RunStatus.PREPARED: 1,
    RunStatus.QUEUED: 2,
    RunStatus.DISPATCHED: 3,
    RunStatus.RUNNING: 4,
    RunStatus.AWAITING_APPROVAL: 4,
}
# Events whose timestamp is recorded as the start of a phase.
PHASES = ("requested", "prepared", "queued", "dispatched", "started")

StatusKey = tuple[int, int, int, int]


def status_key(event_name: str, seq: int) -> StatusKey | None:
    """Total order of the status claims of a run's events; None if the event implies none."""
    target = next_status(None, event_name)
    if target is None:
        return None
    if is_terminal(target):
        return (2, 0, 0, -seq)  # the first terminal event wins
    rank = _RANK[target]
    if event_name.startswith("approval_"):
        return (1, rank, 1, seq)  # approvals toggle: the latest wins
    return (1, rank, 0, -seq)


@dataclass(frozen=True)
class RunFact:
    """One run event with the stream metadata evolve needs."""

    run_id: str
    name: str
    seq: int
    at: datetime | None
    event: Event


@dataclass(frozen=True)
class RunRow:
    run_id: str
    status: str | None = None
    status_key: StatusKey | None = None
    reason: str | None = None
    message: str | None = None
    ended_at: datetime | None = None
    agent_id: str | None = None
    task_id: str | None = None
    origin: str | None = None
    input: str | None = None
    requested_by: str | None = None
    parent_run_id: str | None = None
    info_key: tuple[int, int] | None = None
    catalog_revisions: dict[str, int] = field(default_factory=dict)
    config_seq: int | None = None
    attempt: int = 1
    runtime: str | None = None
    runtime_handle: str | None = None
    dispatch_seq: int | None = None
    queue_position: int | None = None
    queue_seq: int | None = None
    phases: dict[str, datetime] = field(default_factory=dict)
    last_event_at: datetime | None = None
    turns: dict[int, tuple[int, int, float]] = field(default_factory=dict)
    final_totals: tuple[int, int, float] | None = None
    result: dict[str, Any] | None = None
    first_seq: int | None = None
    last_seq: int = 0

    # -- derived ---------------------------------------------------------------------

    @property
    def tokens_in(self) -> int:
        return self.final_totals[0] if self.final_totals else sum(t[0] for t in self.turns.values())

    @property
    def tokens_out(self) -> int:
        return self.final_totals[1] if self.final_totals else sum(t[1] for t in self.turns.values())

    @property
    def cost_usd(self) -> float:
        if self.final_totals:
            return self.final_totals[2]
        return round(sum(t[2] for t in self.turns.values()), 6)

    @property
    def turn_count(self) -> int:
        return max(self.turns, default=0)

    # -- storage ---------------------------------------------------------------------

    def to_doc(self) -> dict[str, Any]:
        # Shallow on purpose: the doc is serialized at once, and `dataclasses.asdict` deep-copies
        # every datetime and dict, which was most of the replay's CPU time.
        doc = {name: getattr(self, name) for name in _ROW_FIELDS}
        doc["catalog_revisions"] = dict(self.catalog_revisions)
        doc["result"] = None if self.result is None else dict(self.result)
        for key in ("status_key", "info_key", "final_totals"):
            value = doc[key]
            doc[key] = None if value is None else list(value)
        doc["ended_at"] = _iso(self.ended_at)
        doc["last_event_at"] = _iso(self.last_event_at)
        doc["phases"] = {k: _iso(v) for k, v in self.phases.items()}
        doc["turns"] = {str(k): list(v) for k, v in self.turns.items()}
        return doc

    @classmethod
    def from_doc(cls, doc: dict[str, Any]) -> RunRow:
        data = dict(doc)
        data["status_key"] = _tuple(data.get("status_key"))
        data["info_key"] = _tuple(data.get("info_key"))
        data["final_totals"] = _tuple(data.get("final_totals"))
        data["ended_at"] = _dt(data.get("ended_at"))
        data["last_event_at"] = _dt(data.get("last_event_at"))
        data["phases"] = {k: _dt(v) for k, v in (data.get("phases") or {}).items()}
        data["turns"] = {int(k): tuple(v) for k, v in (data.get("turns") or {}).items()}
        return cls(**data)


_ROW_FIELDS = tuple(f.name for f in dataclasses.fields(RunRow))


def _iso(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat()


def _dt(value: str | None) -> datetime | None:
    return None if value is None else datetime.fromisoformat(value)


def _tuple(value: Any) -> Any:
    return None if value is None else tuple(value)


def _min_dt(a: datetime | None, b: datetime | None) -> datetime | None:
    if a is None:
        return b
    return a if b is None or a <= b else b


def _max_dt(a: datetime | None, b: datetime | None) -> datetime | None:
    if a is None:
        return b
    return a if b is None or a >= b else b


def evolve(row: RunRow | None, fact: RunFact) -> RunRow:  # noqa: PLR0912 - one branch per event kind
    """The row after `fact`; order-independent and idempotent (see the module docstring)."""
    row = row or RunRow(run_id=fact.run_id)
    ev, seq = fact.event, fact.seq
    changes: dict[str, Any] = {
        "last_seq": max(row.last_seq, seq),
        "first_seq": seq if row.first_seq is None else min(row.first_seq, seq),
        "last_event_at": _max_dt(row.last_event_at, fact.at),
    }
    key = status_key(fact.name, seq)
    if key is not None and (row.status_key is None or key > row.status_key):
        status = next_status(None, fact.name)
        assert status is not None
        changes.update(
            status=status.value,
            status_key=key,
            reason=None,
            message=None,
            ended_at=None,
            final_totals=None,
            result=None,
        )
        if isinstance(ev, TerminalEvent):
            has_totals = ev.tokens_in or ev.tokens_out or ev.cost_usd
            changes.update(
                reason=ev.reason,
                message=ev.message or None,
                ended_at=fact.at,
                final_totals=(ev.tokens_in, ev.tokens_out, ev.cost_usd) if has_totals else None,
                result=ev.result.model_dump(exclude_none=True)
                if isinstance(ev, RunCompleted)
                else None,
            )
    if fact.name in PHASES:
        phases = dict(row.phases)
        first = _min_dt(phases.get(fact.name), fact.at)
        if first is not None:
            phases[fact.name] = first
        changes["phases"] = phases
    if isinstance(ev, RunRequested | RunPrepared):
        info_key = (0 if isinstance(ev, RunRequested) else 1, seq)
        if row.info_key is None or info_key < row.info_key:
            if isinstance(ev, RunRequested):
                changes.update(
                    agent_id=ev.agent_id,
                    task_id=ev.task_id,
                    origin=ev.origin.value,
                    input=ev.input,
                    requested_by=ev.requested_by,
                    parent_run_id=ev.parent_run_id,
                    info_key=info_key,
                )
            else:
                c = ev.config
                changes.update(
                    agent_id=c.agent_id,
                    task_id=c.task_id,
                    origin=c.origin.value,
                    input=c.input,
                    requested_by=None,
                    parent_run_id=None,
                    info_key=info_key,
                )
    if isinstance(ev, RunPrepared):
        if row.config_seq is None or seq < row.config_seq:
            changes.update(catalog_revisions=dict(ev.config.catalog_revisions), config_seq=seq)
        changes["attempt"] = max(row.attempt, ev.config.attempt)
    elif isinstance(ev, RunDispatched):
        if row.dispatch_seq is None or seq > row.dispatch_seq:
            changes.update(runtime=ev.runtime, runtime_handle=ev.handle, dispatch_seq=seq)
        changes["attempt"] = max(row.attempt, ev.attempt)
    elif isinstance(ev, RunQueued):
        if row.queue_seq is None or seq > row.queue_seq:
            changes.update(queue_position=ev.position, queue_seq=seq)
    elif isinstance(ev, RunTurn):
        turns = dict(row.turns)
        seen = turns.get(ev.turn, (0, 0, 0.0))
        turns[ev.turn] = (
            max(seen[0], ev.tokens_in),
            max(seen[1], ev.tokens_out),
            max(seen[2], ev.cost_usd),
        )
        changes["turns"] = turns
    return dataclasses.replace(row, **changes)
