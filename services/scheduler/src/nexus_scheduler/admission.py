"""Admission state of the scheduler, rebuilt by folding run events, and the pure decisions on it.

`AdmissionState.evolve` applies one run event (idempotently: duplicates, redeliveries and a
replay over already-applied events change nothing); `decide` says which waiting runs start
now and which are reported queued; `due` says which active runs must be cancelled, timed out,
resumed or declared lost at a given instant. Nothing here does I/O or reads a clock.

Attempts (issue 24): a run whose runner is gone is resumed as attempt n+1 (`after_loss`) until
its `resume.max_attempts`; it keeps its slot throughout, its wall-clock deadline counts from
its first dispatch, and only its start and heartbeat timers begin again with each attempt.

Budgets (docs/spend.md): a run whose latest budget event is `budget_paused` holds no slot until
`budget_resumed` (or its ending); a run the spend service says must wait before its dispatch
goes back to the queue, held until a recheck time, and does not block the runs behind it.

Sleep (docs/resume.md): an attempt that ended in `sleeping` gives its slot back and the run
waits in SLEEPING (`AdmissionState.sleeping`) until the scheduler wakes it
(`nexus_scheduler.sleep`); the `resuming` of the woken attempt puts it back in the queue in
its place, to be admitted under the limits like any waiting run. Attempts that slept do not
count against `resume.max_attempts`, and the time from the sleep to the woken attempt's
dispatch does not count against the wall-clock deadline.
"""

from __future__ import annotations

from collections import Counter, OrderedDict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Literal

from nexus_events.contract.runstate import RunStatus
from nexus_events.events import (
    CancelRequested,
    Event,
    Reason,
    RunBudgetPaused,
    RunBudgetResumed,
    RunConfig,
    RunDispatched,
    RunHeartbeat,
    RunPrepared,
    RunQueued,
    RunResuming,
    RunSleeping,
    RunStarted,
    RunWake,
    RunWakeRequested,
    TerminalEvent,
    WakeCause,
)
from nexus_events.events.inbox import InboxMessage

LimitName = Literal["global", "agent", "task"]


class Phase(StrEnum):
    WAITING = "waiting"  # prepared, not yet admitted or reported queued
    QUEUED = RunStatus.QUEUED.value  # reported queued, waiting for a slot
    STARTING = "starting"  # admitted (or resumed); the runtime is being asked to start it
    DISPATCHED = RunStatus.DISPATCHED.value  # the runtime has it; the runner has not said hello yet
    RUNNING = RunStatus.RUNNING.value  # the runner started / heartbeats
    # Between attempts after a `sleeping`: no runner, no slot, woken by `nexus_scheduler.sleep`.
    SLEEPING = RunStatus.SLEEPING.value


ACTIVE_PHASES = frozenset({Phase.STARTING, Phase.DISPATCHED, Phase.RUNNING})
WAITING_PHASES = frozenset({Phase.WAITING, Phase.QUEUED})


@dataclass(frozen=True)
class Limits:
    """Concurrency limits; None means unlimited at that level.

    The per-agent limit of a run, first found wins:
    1. `per_agent[agent_id]`: the operator's override in the scheduler settings;
    2. the agent definition's `max_concurrent_runs`, carried in the run's `RunConfig`
       (the config of the run being admitted counts, so a changed definition applies to
       the runs prepared after the change);
    3. `agent_default`: the scheduler's default per-agent limit (None = unlimited).
    """

    global_max: int | None = 50
    agent_default: int | None = None
    task_max: int | None = None
    per_agent: dict[str, int] = field(default_factory=dict)

    def agent_limit(self, agent_id: str, definition: int | None = None) -> int | None:
        if agent_id in self.per_agent:
            return self.per_agent[agent_id]
        if definition is not None:
            return definition
        return self.agent_default


@dataclass(frozen=True)
class CancelInfo:
    at: datetime
    reason: str = Reason.USER_REQUESTED
    requested_by: str | None = None


@dataclass(frozen=True)
class PendingWake:
    """A wake asked of a sleeping run (a signal or an inbox message), not yet carried out."""

    cause: WakeCause
    text: str = ""
    requested_by: str | None = None


@dataclass
class Asleep:
    """The sleep of a run: what its `sleeping` said, and a wake asked meanwhile."""

    until: datetime
    reason: str
    attempt: int
    # The `sleeping` event's stream time: only inbox messages stored after it wake the run
    # (one the awake attempt was sent, redelivered to a new leader, must not).
    stamp: datetime | None = None
    woken_by: PendingWake | None = None

    def wake(self, now: datetime) -> RunWake | None:
        """Why the run wakes at `now`, None while it sleeps on: a wake asked first, else
        the timer."""
        if self.woken_by is not None:
            w = self.woken_by
            return RunWake(
                cause=w.cause,
                slept_until=self.until,
                sleep_reason=self.reason,
                text=w.text,
                requested_by=w.requested_by,
            )
        if now >= self.until:
            return RunWake(cause=WakeCause.TIMER, slept_until=self.until, sleep_reason=self.reason)
        return None


@dataclass
class RunEntry:
    """A run the scheduler is responsible for (not yet terminal)."""

    run_id: str
    config: RunConfig
    phase: Phase = Phase.WAITING
    prepared_at: datetime | None = None
    queued_position: int | None = None
    # Of the current attempt: its start and heartbeat timers count from here.
    dispatched_at: datetime | None = None
    last_seen: datetime | None = None
    handle: str | None = None
    cancel: CancelInfo | None = None
    # The attempt folded last (`dispatched` or `resuming`), and the first attempt's dispatch:
    # the wall-clock deadline spans the attempts.
    attempt: int = 1
    first_dispatched_at: datetime | None = None
    # Set once the scheduler has decided to end the run, so a tick does not decide it twice.
    ending: bool = False
    # Budgets: paused on a reached budget (no slot held), and the turn of the budget event
    # folded last (an older turn's, redelivered late, changes nothing).
    budget_paused: bool = False
    budget_turn: int = 0
    # Waiting on a budget before dispatch: the reason last reported `queued`, and when to ask
    # the spend service again (None: at the next admission).
    budget_wait: str | None = None
    budget_recheck_at: datetime | None = None
    # Sleep: the sleep under way (phase SLEEPING), its start (until the woken attempt's
    # dispatch: that time is added to `paused_seconds`, which the deadline does not count),
    # the attempts that ended in a sleep (they do not count against max_attempts), the wake
    # the current attempt starts with (its config's `wake`), and whether this scheduler is
    # waking it now (decided, `resuming` not folded yet).
    sleep: Asleep | None = None
    asleep_since: datetime | None = None
    paused_seconds: float = 0.0
    slept_attempts: int = 0
    wake: RunWake | None = None
    waking: bool = False

    @property
    def holds_slot(self) -> bool:
        return self.phase in ACTIVE_PHASES and not self.budget_paused

    @property
    def agent_id(self) -> str:
        return self.config.agent_id

    @property
    def task_id(self) -> str | None:
        return self.config.task_id

    @property
    def wall_limit_seconds(self) -> int:
        return self.config.runtime.timeout_seconds or self.config.budgets.max_wall_seconds

    @property
    def max_attempts(self) -> int:
        return self.config.resume.max_attempts

    @property
    def attempts_spent(self) -> int:
        """Attempts that count against `max_attempts`: those that did not end in a sleep."""
        return self.attempt - self.slept_attempts

    def attempt_config(self) -> RunConfig:
        """The RunConfig of the current attempt: the run's own, with its attempt number and
        the wake it starts with (set only on the attempt after a sleep)."""
        if self.config.attempt == self.attempt and self.config.wake == self.wake:
            return self.config
        return self.config.model_copy(update={"attempt": self.attempt, "wake": self.wake})


# Finished run ids remembered to ignore their late events (a heartbeat or duplicate after
# the end). Late events come seconds after the end, not a hundred thousand runs later, and
# the set would otherwise grow with the whole history (about 100 bytes an id).
FINISHED_REMEMBERED = 100_000


class RecentlyFinished:
    """A set of the most recent `limit` run ids; the oldest is forgotten first."""

    def __init__(self, limit: int = FINISHED_REMEMBERED) -> None:
        self.limit = limit
        self._ids: OrderedDict[str, None] = OrderedDict()

    def add(self, run_id: str) -> None:
        self._ids[run_id] = None
        self._ids.move_to_end(run_id)
        while len(self._ids) > self.limit:
            self._ids.popitem(last=False)

    def __contains__(self, run_id: object) -> bool:
        return run_id in self._ids

    def __len__(self) -> int:
        return len(self._ids)

    def __iter__(self) -> Iterator[str]:
        return iter(self._ids)


@dataclass
class AdmissionState:
    """Everything admission needs, folded from the NEXUS_RUNS events."""

    runs: dict[str, RunEntry] = field(default_factory=dict)
    # Waiting run ids in FIFO (prepared) order; a dict keeps insertion order and O(1) removal.
    waiting: dict[str, None] = field(default_factory=dict)
    active_total: int = 0
    active_by_agent: Counter[str] = field(default_factory=Counter)
    active_by_task: Counter[str] = field(default_factory=Counter)
    finished: RecentlyFinished = field(default_factory=RecentlyFinished)
    # Cancels of runs whose `prepared` has not arrived yet.
    early_cancels: dict[str, CancelInfo] = field(default_factory=dict)
    # Waiting runs held by a budget until their recheck time.
    budget_held: set[str] = field(default_factory=set)
    # Runs in phase SLEEPING.
    sleeping: set[str] = field(default_factory=set)

    # -- folding events ---------------------------------------------------------------------

    def evolve(  # noqa: PLR0911, PLR0912 - one fold over the run events reads best whole
        self, run_id: str, event: Event, at: datetime, *, stamp: datetime | None = None
    ) -> bool:
        """Apply one run event seen at `at` (stored at `stamp`, its stream time, if known);
        return whether it changed anything."""
        if run_id in self.finished:
            return False
        if isinstance(event, TerminalEvent):
            return self._finish(run_id)
        if isinstance(event, CancelRequested):
            return self._cancel(run_id, CancelInfo(at, event.reason, event.requested_by))
        if isinstance(event, RunPrepared):
            return self._prepared(run_id, event.config, at)
        entry = self.runs.get(run_id)
        if entry is None:
            return False
        if isinstance(event, RunQueued):
            if entry.phase not in WAITING_PHASES:
                return False
            changed = entry.phase is Phase.WAITING
            if changed:
                entry.phase, entry.queued_position = Phase.QUEUED, event.position
            if event.limit == "budget" and entry.budget_wait != event.waiting_for:
                entry.budget_wait, entry.queued_position = event.waiting_for, event.position
                changed = True
            return changed
        if isinstance(event, RunBudgetPaused | RunBudgetResumed):
            return self._budget_toggle(entry, event)
        if isinstance(event, RunDispatched):
            return self._dispatched(entry, event, at)
        if isinstance(event, RunResuming):
            return self._resuming(entry, event)
        if isinstance(event, RunSleeping):
            return self._sleeping(entry, event, at, stamp)
        if isinstance(event, RunWakeRequested):
            return self._wake_asked(
                entry, PendingWake(WakeCause.SIGNAL, event.reason, event.requested_by)
            )
        if isinstance(event, RunStarted | RunHeartbeat):
            if entry.phase is Phase.SLEEPING or (
                entry.attempt > 1 and entry.phase in WAITING_PHASES
            ):
                return False  # the slept attempt's, late: the run has no runner now
            if entry.attempt > 1 and (
                entry.phase is Phase.STARTING
                or (entry.dispatched_at is not None and at < entry.dispatched_at)
            ):
                # Neither events nor beats name their attempt: before the new attempt's
                # dispatch (a lagging consumer, the last beat a rebuild reads) they are the
                # dead attempt's, and must not start its heartbeat window early.
                return False
            if entry.phase in WAITING_PHASES:
                # The runner says it runs although we never saw it dispatched: count it.
                self._activate(entry)
            if entry.dispatched_at is None:
                # Also a runner quicker than our own `dispatched`: the timers need a start.
                entry.dispatched_at = at
                entry.first_dispatched_at = entry.first_dispatched_at or at
            if entry.phase is not Phase.RUNNING:
                entry.phase = Phase.RUNNING
            entry.last_seen = max(entry.last_seen or at, at)
            return True
        return False

    def _dispatched(self, entry: RunEntry, event: RunDispatched, at: datetime) -> bool:
        if event.attempt < entry.attempt:
            return False  # an earlier attempt's, folded late
        newer = event.attempt > entry.attempt
        changed = newer or entry.phase in WAITING_PHASES or entry.phase is Phase.STARTING
        if entry.phase in WAITING_PHASES:
            self._activate(entry)
        if changed and entry.asleep_since is not None:
            # The woken attempt runs: the sleep (and any wait for a slot after it) ends here.
            entry.paused_seconds += max(0.0, (at - entry.asleep_since).total_seconds())
            entry.asleep_since = None
        if changed:
            entry.attempt = event.attempt
            entry.phase = Phase.DISPATCHED
            entry.handle, entry.dispatched_at = event.handle, at
            entry.first_dispatched_at = entry.first_dispatched_at or at
            entry.last_seen = at
        elif entry.handle is None and event.attempt == entry.attempt:
            # The runner's `started` came first (and started the timers): note the handle.
            entry.handle = event.handle
            if entry.dispatched_at is None:
                entry.dispatched_at = at
                entry.first_dispatched_at = entry.first_dispatched_at or at
            changed = True
        return changed

    def _budget_toggle(self, entry: RunEntry, event: RunBudgetPaused | RunBudgetResumed) -> bool:
        """`budget_paused` gives the run's slot back, `budget_resumed` takes it again."""
        if event.turn < entry.budget_turn:
            return False  # an older turn's, folded late
        entry.budget_turn = event.turn
        paused = isinstance(event, RunBudgetPaused)
        if paused == entry.budget_paused:
            return False
        if entry.phase in ACTIVE_PHASES:
            self._count(entry, -1 if paused else 1)
        entry.budget_paused = paused
        if not paused:
            self._recheck_budget_holds()  # a budget was extended: the held may go too
        return True

    def _recheck_budget_holds(self) -> None:
        for run_id in self.budget_held:
            held = self.runs.get(run_id)
            if held is not None:
                held.budget_recheck_at = None
        self.budget_held.clear()

    def _resuming(self, entry: RunEntry, event: RunResuming) -> bool:
        """Attempt `event.attempt` is being started: the run keeps its slot (it is never
        queued again) and waits in STARTING for that attempt's `dispatched`."""
        if event.attempt <= entry.attempt:
            return False
        if entry.phase is Phase.SLEEPING:
            return self._woken(entry, event)
        entry.wake = None  # a runner loss: the new attempt goes on, it did not wake
        if entry.phase in WAITING_PHASES:
            self._activate(entry)
        elif entry.budget_paused:
            self._count(entry, 1)  # the new attempt reserves afresh; it runs until it pauses
        entry.budget_paused = False
        entry.attempt = event.attempt
        entry.phase = Phase.STARTING
        entry.handle = None
        entry.dispatched_at = None
        entry.ending = False
        return True

    def _sleeping(
        self, entry: RunEntry, event: RunSleeping, at: datetime, stamp: datetime | None
    ) -> bool:
        """The current attempt ended to sleep: it gives its slot back and waits for a wake."""
        if event.attempt != entry.attempt or entry.phase not in ACTIVE_PHASES:
            return False  # an earlier attempt's, or folded twice
        if entry.holds_slot:
            self._count(entry, -1)
        entry.phase = Phase.SLEEPING
        entry.budget_paused = False
        entry.sleep = Asleep(event.until, event.reason, event.attempt, stamp)
        entry.asleep_since = at
        entry.slept_attempts += 1
        entry.ending = entry.waking = False
        self.sleeping.add(entry.run_id)
        return True

    def _wake_asked(self, entry: RunEntry, wake: PendingWake) -> bool:
        """A wake for a sleeping run (the first one counts); for any other run, nothing."""
        if entry.phase is not Phase.SLEEPING or entry.sleep is None:
            return False
        if entry.sleep.woken_by is not None:
            return False
        entry.sleep.woken_by = wake
        return True

    def message(self, run_id: str, message: InboxMessage, stamp: datetime | None) -> bool:
        """An inbox message for `run_id`, stored at `stamp`: it wakes a sleeping run when it
        came after the sleep."""
        entry = self.runs.get(run_id)
        if entry is None or entry.sleep is None:
            return False
        slept = entry.sleep.stamp
        if slept is not None and stamp is not None and stamp < slept:
            return False
        return self._wake_asked(entry, PendingWake(WakeCause.MESSAGE, message.text, message.sender))

    def _woken(self, entry: RunEntry, event: RunResuming) -> bool:
        """The attempt after a sleep: the run goes back to the queue, in its place."""
        self.sleeping.discard(entry.run_id)
        entry.sleep = None
        entry.waking = entry.ending = False
        entry.wake = event.wake
        entry.attempt = event.attempt
        entry.phase = Phase.QUEUED
        entry.handle = None
        self.waiting = dict.fromkeys(r for r in self.runs if r in self.waiting or r == entry.run_id)
        return True

    def _prepared(self, run_id: str, config: RunConfig, at: datetime) -> bool:
        if run_id in self.runs:
            return False
        entry = RunEntry(run_id=run_id, config=config, prepared_at=at)
        entry.cancel = self.early_cancels.pop(run_id, None)
        self.runs[run_id] = entry
        self.waiting[run_id] = None
        return True

    def _cancel(self, run_id: str, info: CancelInfo) -> bool:
        entry = self.runs.get(run_id)
        if entry is None:
            if run_id in self.early_cancels:
                return False
            self.early_cancels[run_id] = info
            return True
        if entry.cancel is not None:
            return False
        entry.cancel = info
        return True

    def _activate(self, entry: RunEntry) -> None:
        """The run leaves the queue for an active phase; it takes a slot unless paused."""
        self.waiting.pop(entry.run_id, None)
        self.budget_held.discard(entry.run_id)
        entry.budget_recheck_at = None
        if not entry.budget_paused:
            self._count(entry, 1)

    def _count(self, entry: RunEntry, delta: Literal[1, -1]) -> None:
        self.active_total += delta
        if delta > 0:
            self.active_by_agent[entry.agent_id] += 1
            if entry.task_id is not None:
                self.active_by_task[entry.task_id] += 1
            return
        _decrement(self.active_by_agent, entry.agent_id)
        if entry.task_id is not None:
            _decrement(self.active_by_task, entry.task_id)

    def _finish(self, run_id: str) -> bool:
        self.finished.add(run_id)
        self.early_cancels.pop(run_id, None)
        entry = self.runs.pop(run_id, None)
        if entry is None:
            return True
        self.waiting.pop(run_id, None)
        self.budget_held.discard(run_id)
        self.sleeping.discard(run_id)
        if entry.holds_slot:
            self._count(entry, -1)
        # A run's ending may free a budget's run limit: the held are asked again.
        self._recheck_budget_holds()
        return True

    # -- transitions the scheduler makes itself ---------------------------------------------

    def pending_attempts(self) -> list[str]:
        """Runs resumed whose new attempt was not dispatched (after a rebuild: the scheduler
        that published `resuming` stopped before the start)."""
        return [e.run_id for e in self.runs.values() if e.phase is Phase.STARTING and e.attempt > 1]

    def begin_start(self, run_id: str) -> None:
        """Take a slot for `run_id` (admitted, being started by the runtime)."""
        entry = self.runs[run_id]
        if entry.phase in WAITING_PHASES:
            self._activate(entry)
            entry.phase = Phase.STARTING

    def hold_for_budget(self, run_id: str, recheck_at: datetime) -> bool:
        """The spend service says `run_id` (being started) must wait for a budget: it gives
        its slot back and waits in the queue, in its place, until `recheck_at` (or a run's
        ending or a budget's extension). False if the run is no longer being started."""
        entry = self.runs.get(run_id)
        if entry is None or entry.phase is not Phase.STARTING or entry.attempt > 1:
            return False
        if entry.holds_slot:
            self._count(entry, -1)
        entry.phase = Phase.QUEUED
        entry.budget_recheck_at = recheck_at
        self.budget_held.add(run_id)
        # Back in its place: `runs` keeps the prepared order.
        self.waiting = dict.fromkeys(r for r in self.runs if r in self.waiting or r == run_id)
        return True

    def position(self, run_id: str) -> int:
        """1-based place of a waiting run in the queue."""
        return list(self.waiting).index(run_id) + 1

    # -- queries ----------------------------------------------------------------------------

    def active(self) -> Iterable[RunEntry]:
        return (e for e in self.runs.values() if e.phase in ACTIVE_PHASES)

    def queue(self) -> list[str]:
        """Waiting run ids, first in line first."""
        return list(self.waiting)


def _decrement(counter: Counter[str], key: str) -> None:
    counter[key] -= 1
    if counter[key] <= 0:
        del counter[key]


# -- decisions --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Start:
    run_id: str
    config: RunConfig


@dataclass(frozen=True)
class Queue:
    run_id: str
    event: RunQueued


@dataclass(frozen=True)
class CancelWaiting:
    """A run cancelled before it got a slot: it leaves the queue and ends `cancelled`."""

    run_id: str
    cancel: CancelInfo


Decision = Start | Queue | CancelWaiting


def decide(state: AdmissionState, limits: Limits, now: datetime | None = None) -> list[Decision]:
    """What to do with the waiting runs now, in FIFO order.

    A run starts when the global, its agent's and its task's limits all have room, counting
    the runs started earlier in the same call. A run blocked by its agent or task limit does
    not block runs of other agents behind it, nor does a run held by a budget before its
    recheck time (`now`; None: every hold still stands). Runs not started and not yet
    reported queued get a `queued` event with their 1-based position among the runs still
    waiting. A started run is a candidate: the service asks the spend service before its
    dispatch (`AdmissionState.hold_for_budget` on a wait).
    """
    out: list[Decision] = []
    total = state.active_total
    by_agent = Counter(state.active_by_agent)
    by_task = Counter(state.active_by_task)
    position = 0
    for run_id in state.waiting:
        entry = state.runs[run_id]
        if entry.cancel is not None:
            out.append(CancelWaiting(run_id, entry.cancel))
            continue
        if entry.budget_recheck_at is not None and (now is None or now < entry.budget_recheck_at):
            position += 1
            continue
        blocked = _blocking_limit(entry, limits, total, by_agent, by_task)
        if blocked is None:
            out.append(Start(run_id, entry.attempt_config()))
            total += 1
            by_agent[entry.agent_id] += 1
            if entry.task_id is not None:
                by_task[entry.task_id] += 1
            continue
        position += 1
        if entry.phase is Phase.WAITING:
            out.append(Queue(run_id, RunQueued(position=position, limit=blocked)))
    return out


def _blocking_limit(
    entry: RunEntry,
    limits: Limits,
    total: int,
    by_agent: Counter[str],
    by_task: Counter[str],
) -> LimitName | None:
    if limits.global_max is not None and total >= limits.global_max:
        return "global"
    agent_max = limits.agent_limit(entry.agent_id, entry.config.max_concurrent_runs)
    if agent_max is not None and by_agent[entry.agent_id] >= agent_max:
        return "agent"
    if (
        limits.task_max is not None
        and entry.task_id is not None
        and by_task[entry.task_id] >= limits.task_max
    ):
        return "task"
    return None


# -- timers -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Timeouts:
    """Seconds after which the scheduler acts on an active run."""

    cancel_grace: float = 30.0
    heartbeat_timeout: float = 90.0
    start_timeout: float = 300.0


@dataclass(frozen=True)
class Escalate:
    """The runner did not stop within the grace period: stop the runtime, end `cancelled`."""

    run_id: str
    cancel: CancelInfo


@dataclass(frozen=True)
class Expire:
    """The wall-clock budget is spent: stop the runtime, end `timed_out`."""

    run_id: str
    limit_seconds: int


@dataclass(frozen=True)
class Lose:
    """The runner is gone and the run's attempts are spent: end it (`lost`, or `failed`
    for a runtime error), the message saying so."""

    run_id: str
    reason: str
    message: str


@dataclass(frozen=True)
class Resume:
    """The runner of attempt `attempt - 1` is gone: stop what is left of it and start
    `attempt`. `reason` is the code the run would have ended with."""

    run_id: str
    attempt: int
    reason: str
    message: str


Due = Escalate | Expire | Lose | Resume


def after_loss(entry: RunEntry, reason: str, message: str) -> Escalate | Lose | Resume:
    """What follows the loss of a run's runner: a pending cancel wins (the run ends
    cancelled, no new attempt), else the next attempt while `resume.max_attempts` allows,
    else the end with `reason`."""
    if entry.cancel is not None:
        return Escalate(entry.run_id, entry.cancel)
    if entry.attempts_spent < entry.max_attempts:
        return Resume(entry.run_id, entry.attempt + 1, reason, message)
    how = "failed" if reason == Reason.RUNTIME_ERROR else "lost"
    return Lose(
        entry.run_id,
        reason,
        f"runner {how} after {entry.attempts_spent} of {entry.max_attempts} attempts: {message}",
    )


def due(state: AdmissionState, now: datetime, timeouts: Timeouts) -> list[Due]:
    """The active runs whose cancel grace, deadline or heartbeat window has passed at `now`.

    The deadline counts from the run's first dispatch, less the time it slept; the start and
    heartbeat windows from the current attempt's.
    """
    out: list[Due] = []
    for entry in state.active():
        if entry.ending or entry.phase is Phase.STARTING or entry.dispatched_at is None:
            continue
        first = entry.first_dispatched_at or entry.dispatched_at
        if entry.cancel is not None and now >= max(
            entry.cancel.at, entry.dispatched_at
        ) + timedelta(seconds=timeouts.cancel_grace):
            out.append(Escalate(entry.run_id, entry.cancel))
        elif now >= first + timedelta(seconds=entry.wall_limit_seconds + entry.paused_seconds):
            out.append(Expire(entry.run_id, entry.wall_limit_seconds))
        elif entry.phase is Phase.DISPATCHED and now > entry.dispatched_at + timedelta(
            seconds=timeouts.start_timeout
        ):
            out.append(
                after_loss(
                    entry,
                    Reason.HEARTBEAT_MISSING,
                    f"runner never started within {timeouts.start_timeout:g}s of dispatch",
                )
            )
        elif (
            entry.phase is Phase.RUNNING
            and entry.last_seen is not None
            and now > entry.last_seen + timedelta(seconds=timeouts.heartbeat_timeout)
        ):
            out.append(
                after_loss(
                    entry,
                    Reason.HEARTBEAT_MISSING,
                    f"no heartbeat for {timeouts.heartbeat_timeout:g}s",
                )
            )
    return out
