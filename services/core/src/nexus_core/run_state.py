"""The `agent_runs` row of one run and the pure `evolve` that folds a run event into it.

Every field is a function of the SET of (stream sequence, event) pairs seen, not of the order
they were applied in: applying a run's events in any order, with duplicates and redeliveries,
gives the row that applying them in stream order gives. That is how each field gets there:

- status: the status-implying event with the greatest `status_key` wins. Keys rank statuses
  as `runstate` does: a terminal event beats everything and the earliest terminal (lowest
  sequence) wins, so terminal states are final; live statuses only move forwards; the
  approval events toggle running/awaiting_approval by sequence (latest wins), and a heartbeat
  or turn never toggles back. In stream order this equals folding `runstate.next_status`.
- who/what (agent, task, origin, input, requested_by, labels): from the earliest `requested`,
  else the earliest `prepared` (which carries no labels). Config (catalog revisions,
  resume.max_attempts): earliest `prepared`.
- runtime handle: latest `dispatched`; attempt: the highest any `dispatched`, `resuming` or
  `resumed` names; queue position: latest `queued`.
- condensations: the distinct (turn, strategy) pairs of `condensed` events, so a redelivered
  or re-published condensation counts once.
- phase timestamps: the first (minimum) JetStream timestamp of each phase; last_event_at the max.
- the lab (docs/lab.md): the LabSpec with who/what; the repo from the earliest config, else
  the earliest request; base_commit from the earliest `started`; the first divergence is the
  earliest `diverged`; golden is the latest mark, counted only when it came after the
  terminal event (a mark on a live run is nothing).
- budgets (docs/spend.md): the team from the earliest config; the latest (by sequence) of
  `budget_paused`/`budget_resumed`, and the budget reason of the latest `queued`; budget_wait
  derives from them and the status.
- sleep (docs/resume.md): the latest `sleeping` by sequence (its wake time and reason);
  sleeping_until derives from it and the status (shown only while the run sleeps).
- tokens and cost: per turn (keyed by turn number, so a duplicate turn counts once), summed; the
  winning terminal event's totals replace the sums when it carries any.
"""

from __future__ import annotations

import bisect
import dataclasses
import functools
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, cast

from nexus_events.contract.runstate import RunEvent, RunStatus, is_terminal, live_rank, next_status
from nexus_events.events import (
    Event,
    RunBudgetPaused,
    RunBudgetResumed,
    RunCompleted,
    RunCondensed,
    RunDispatched,
    RunPrepared,
    RunQueued,
    RunRequested,
    RunResumed,
    RunResuming,
    RunSleeping,
    RunStarted,
    RunTurn,
    TerminalEvent,
)
from nexus_events.events.lab import RunDiverged, RunGoldenMarked
from pydantic import TypeAdapter

# Events whose timestamp is recorded as the start of a phase.
PHASES = (
    RunEvent.REQUESTED,
    RunEvent.PREPARED,
    RunEvent.QUEUED,
    RunEvent.DISPATCHED,
    RunEvent.STARTED,
)

StatusKey = tuple[int, int, int, int]
_TERMINAL = 2  # the class of a terminal event's status key: above every live status


@functools.cache  # keyed by event name: the registered run events, a handful
def _claim(event_name: str) -> tuple[int, int, int] | None:
    """(class, rank, toggles) of the status an event claims, None if it claims none."""
    target = next_status(None, event_name)
    if target is None:
        return None
    if is_terminal(target):
        return (_TERMINAL, 0, 0)
    return (1, live_rank(target), 1 if _toggles(event_name, target) else 0)


def _toggles(event_name: str, target: RunStatus) -> bool:
    """Whether the event moves a run between the statuses of equal rank (runstate's toggles:
    the approval events, `sleeping`, and `resumed` ending an approval wait the dead attempt
    left open or the sleep of the attempt before)."""
    if target is RunStatus.RUNNING:
        return any(
            next_status(s, event_name) is target
            for s in (RunStatus.AWAITING_APPROVAL, RunStatus.SLEEPING)
        )
    if target in (RunStatus.AWAITING_APPROVAL, RunStatus.SLEEPING):
        return next_status(RunStatus.RUNNING, event_name) is target
    return False


def status_key(event_name: str, seq: int) -> StatusKey | None:
    """Total order of the status claims of a run's events; None if the event implies none.

    A terminal event beats everything and the first terminal (lowest seq) wins; approvals
    toggle, so the latest wins; other live statuses rank by progress, the earliest first.
    """
    claim = _claim(event_name)
    if claim is None:
        return None
    kind, rank, toggles = claim
    return (kind, rank, toggles, seq if toggles else -seq)


@dataclass(slots=True)  # not frozen: made per event, and frozen init costs 5x
class RunFact:
    """One run event with the stream metadata evolve needs."""

    run_id: str
    name: str
    seq: int
    at: datetime | None
    event: Event


@dataclass(slots=True)
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
    # The request's labels: a flow's runs carry flow, flow_run_id, step and round.
    labels: dict[str, str] = field(default_factory=dict)
    info_key: tuple[int, int] | None = None
    catalog_revisions: dict[str, int] = field(default_factory=dict)
    config_seq: int | None = None
    attempt: int = 1
    max_attempts: int | None = None
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
    # Sorted and distinct (a list, not a set: the stored document must not depend on the
    # order events came in).
    condensed: list[tuple[int, str]] = field(default_factory=list)
    # The lab (docs/lab.md). repo: the request's, replaced by the earliest config's; lab: the
    # LabSpec, from the same event as agent_id; base_commit from the earliest `started`.
    repo: dict[str, Any] | None = None
    lab: dict[str, Any] | None = None
    base_commit: str | None = None
    started_seq: int | None = None
    # The canary arm it was assembled with (CanaryArm), from the earliest config.
    canary: dict[str, Any] | None = None
    # The latest golden mark (seq, golden): it counts only if it came after the run ended.
    golden_mark: tuple[int, bool] | None = None
    # The first divergence (seq, turn, kind): the earliest `diverged` wins.
    divergence: tuple[int, int, str] | None = None
    # Budgets (docs/spend.md): the team, from the earliest config; the latest budget event
    # (seq, the pause's message, None for a resume); the latest `queued`'s budget reason.
    team: str | None = None
    budget_pause: tuple[int, str | None] | None = None
    queue_wait: str | None = None
    # Sleep (docs/resume.md): the latest `sleeping` (seq, wake time, reason).
    sleep: tuple[int, datetime, str] | None = None

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

    @property
    def condensations(self) -> int:
        return len(self.condensed)

    @property
    def terminal_seq(self) -> int | None:
        """Stream sequence of the event that ended the run (None while it is live)."""
        key = self.status_key
        return -key[3] if key is not None and key[0] == _TERMINAL else None

    @property
    def golden(self) -> bool:
        """Marked golden: the latest mark says so and came after the run ended (a mark on a
        live run counts for nothing, whatever order the events are folded in)."""
        mark, ended = self.golden_mark, self.terminal_seq
        return mark is not None and ended is not None and mark[0] > ended and mark[1]

    @property
    def budget_wait(self) -> str | None:
        """Why the run waits on a budget: paused on an ask (the latest budget event is a
        pause and the run awaits), or queued behind one; None otherwise."""
        if self.status == RunStatus.AWAITING_APPROVAL and self.budget_pause is not None:
            return self.budget_pause[1]
        if self.status == RunStatus.QUEUED:
            return self.queue_wait
        return None

    @property
    def sleeping_until(self) -> datetime | None:
        """The wake time of a sleeping run; None when it does not sleep."""
        if self.status == RunStatus.SLEEPING and self.sleep is not None:
            return self.sleep[1]
        return None

    @property
    def sleep_reason(self) -> str | None:
        """Why a sleeping run sleeps (its agent's words); None when it does not sleep."""
        if self.status == RunStatus.SLEEPING and self.sleep is not None:
            return self.sleep[2]
        return None

    @property
    def lab_source(self) -> str | None:
        """The run a lab run replays or forks."""
        return None if self.lab is None else cast(str, self.lab["source_run_id"])

    @property
    def canary_arm(self) -> str | None:
        return None if self.canary is None else cast(str, self.canary["arm"])

    @property
    def lab_mode(self) -> str | None:
        return None if self.lab is None else cast(str, self.lab["mode"])

    # -- storage ---------------------------------------------------------------------

    def to_json(self) -> str:
        """The row as the JSON document stored with it (and read back by `from_json`)."""
        return _ROW_JSON.dump_json(self).decode()

    @classmethod
    def from_json(cls, doc: str | bytes) -> RunRow:
        # pydantic-core parses straight into the dataclass: ISO datetimes, lists for tuples and
        # string keys for the int-keyed `turns` come back as the row's own types.
        return _ROW_JSON.validate_json(doc)


# Serializing in pydantic-core is 3x faster than json.dumps of a hand-built dict, and the
# row is written on every batch that touches the run.
_ROW_JSON: TypeAdapter[RunRow] = TypeAdapter(RunRow)


def evolve(row: RunRow | None, fact: RunFact) -> RunRow:
    """The row after `fact`; order-independent and idempotent (see the module docstring).

    Pure: `row` is left as it was. Projections that own their rows use `fold` instead.
    """
    if row is None:
        new = RunRow(run_id=fact.run_id)
    else:
        new = dataclasses.replace(
            row,
            catalog_revisions=dict(row.catalog_revisions),
            labels=dict(row.labels),
            phases=dict(row.phases),
            turns=dict(row.turns),
            result=None if row.result is None else dict(row.result),
            condensed=list(row.condensed),
            repo=None if row.repo is None else dict(row.repo),
            lab=None if row.lab is None else dict(row.lab),
            canary=None if row.canary is None else dict(row.canary),
        )
    fold(new, fact)
    return new


def fold(row: RunRow, fact: RunFact) -> None:
    """Apply `fact` to `row` in place: what `evolve` returns, without copying the row.

    A replay folds every event of a batch into rows loaded once per batch; building a new
    frozen row per event (``dataclasses.replace``) was the largest cost of the projection.
    """
    seq, at, name = fact.seq, fact.at, fact.name
    row.last_seq = max(row.last_seq, seq)
    if row.first_seq is None or seq < row.first_seq:
        row.first_seq = seq
    if at is not None:
        if row.last_event_at is None or at > row.last_event_at:
            row.last_event_at = at
        if name in PHASES:
            seen = row.phases.get(name)
            if seen is None or at < seen:
                row.phases[name] = at
    key = status_key(name, seq)
    if key is not None and (row.status_key is None or key > row.status_key):
        _fold_status(row, fact, key)
    _fold_details(row, fact.event, seq)


def _fold_status(row: RunRow, fact: RunFact, key: StatusKey) -> None:
    status = next_status(None, fact.name)
    assert status is not None
    row.status, row.status_key = status.value, key
    ev = fact.event
    if key[0] == _TERMINAL:
        ev = cast(TerminalEvent, ev)  # a terminal status claim comes only from one
        has_totals = ev.tokens_in or ev.tokens_out or ev.cost_usd
        row.reason, row.message, row.ended_at = ev.reason, ev.message or None, fact.at
        row.final_totals = (ev.tokens_in, ev.tokens_out, ev.cost_usd) if has_totals else None
        row.result = ev.result.model_dump(exclude_none=True) if type(ev) is RunCompleted else None
    else:
        row.reason = row.message = row.ended_at = None
        row.final_totals = row.result = None


def _fold_details(row: RunRow, ev: Event, seq: int) -> None:
    # Exact types: isinstance on a pydantic model class goes through ABCMeta, several times
    # slower, and run event classes have no subclasses.
    if type(ev) is RunRequested:
        info_key = (0, seq)
        if row.info_key is None or info_key < row.info_key:
            row.agent_id, row.task_id, row.origin = ev.agent_id, ev.task_id, ev.origin.value
            row.input, row.requested_by = ev.input, ev.requested_by
            row.parent_run_id, row.info_key = ev.parent_run_id, info_key
            row.labels = dict(ev.labels)
            row.lab = None if ev.lab is None else ev.lab.model_dump(mode="json")
            if row.config_seq is None:  # the config's repo, once seen, wins
                row.repo = None if ev.repo is None else ev.repo.model_dump(mode="json")
    elif type(ev) is RunPrepared:
        c = ev.config
        info_key = (1, seq)
        if row.info_key is None or info_key < row.info_key:
            row.agent_id, row.task_id, row.origin = c.agent_id, c.task_id, c.origin.value
            row.input, row.requested_by = c.input, None
            row.parent_run_id, row.info_key = None, info_key
            row.labels = {}
            row.lab = None if c.lab is None else c.lab.model_dump(mode="json")
        if row.config_seq is None or seq < row.config_seq:
            row.catalog_revisions, row.config_seq = dict(c.catalog_revisions), seq
            row.max_attempts = c.resume.max_attempts
            row.repo = None if c.repo is None else c.repo.model_dump(mode="json")
            row.canary = None if c.canary is None else c.canary.model_dump(mode="json")
            row.team = c.team
        row.attempt = max(row.attempt, c.attempt)
    elif type(ev) is RunDispatched:
        if row.dispatch_seq is None or seq > row.dispatch_seq:
            row.runtime, row.runtime_handle, row.dispatch_seq = ev.runtime, ev.handle, seq
        row.attempt = max(row.attempt, ev.attempt)
    elif type(ev) is RunQueued:
        if row.queue_seq is None or seq > row.queue_seq:
            row.queue_position, row.queue_seq = ev.position, seq
            row.queue_wait = ev.waiting_for if ev.limit == "budget" else None
    elif type(ev) is RunTurn:
        seen = row.turns.get(ev.turn, (0, 0, 0.0))
        row.turns[ev.turn] = (
            max(seen[0], ev.tokens_in),
            max(seen[1], ev.tokens_out),
            max(seen[2], ev.cost_usd),
        )
    else:
        _fold_resume(row, ev, seq)


def _fold_resume(row: RunRow, ev: Event, seq: int) -> None:
    if type(ev) is RunResuming or type(ev) is RunResumed:
        row.attempt = max(row.attempt, ev.attempt)
    elif type(ev) is RunSleeping:
        if row.sleep is None or seq > row.sleep[0]:
            row.sleep = (seq, ev.until, ev.reason)
    elif type(ev) is RunCondensed:
        key = (ev.turn, ev.condensation.strategy)
        at = bisect.bisect_left(row.condensed, key)
        if at == len(row.condensed) or row.condensed[at] != key:
            row.condensed.insert(at, key)
    else:
        _fold_lab(row, ev, seq)


def _fold_lab(row: RunRow, ev: Event, seq: int) -> None:
    if type(ev) is RunStarted:
        if row.started_seq is None or seq < row.started_seq:
            row.base_commit, row.started_seq = ev.base_commit, seq
    elif type(ev) is RunGoldenMarked:
        if row.golden_mark is None or seq > row.golden_mark[0]:
            row.golden_mark = (seq, ev.golden)
    elif type(ev) is RunDiverged and (row.divergence is None or seq < row.divergence[0]):
        row.divergence = (seq, ev.turn, ev.kind.value)
    elif (type(ev) is RunBudgetPaused or type(ev) is RunBudgetResumed) and (
        row.budget_pause is None or seq > row.budget_pause[0]
    ):
        row.budget_pause = (seq, ev.message if type(ev) is RunBudgetPaused else None)
