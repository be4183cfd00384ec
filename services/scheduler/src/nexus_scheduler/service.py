"""The scheduler's active part: admission state in, runtime calls and run events out.

`SchedulerService` owns the `AdmissionState`. It is fed run events (`observe`), then asked
to act on them (`act`): publish `queued`, start runs and publish `dispatched`, cancel runs
that were never started. `tick` runs the timers (cancel grace, deadline, heartbeats) and asks
the runtime about active runs. Every event it publishes carries a deterministic
``Nats-Msg-Id`` (run id + event), so a retry or a second replica never stores it twice.

A run whose runner is gone (heartbeats missing, the process or Job ended without a terminal
event, failed or evicted) is resumed (issue 24) while its `resume.max_attempts` allows: the
old attempt is stopped, `resuming` (attempt n+1) is published and the same RunConfig is
started again as attempt n+1, which publishes its own `dispatched`. The run keeps its slot.

Before a run's first dispatch the spend service is asked whether a budget lets it start
(`nexus_scheduler.spend_admission`, docs/spend.md): wait puts it back in the queue (`queued`,
limit budget, with the reason) to be asked again later, stop ends it `budget_exceeded`.

Sleep (docs/resume.md): a run whose attempt ended in `sleeping` holds no slot; at its wake
time, on `wake_requested` or on a message on its inbox (`observe_inbox`) `act` publishes
`resuming` (attempt n+1, reason `woke`) and admits it again like a queued run
(`nexus_scheduler.sleep`). A runner whose process ends after `sleeping` is not lost: before a
loss is decided, NEXUS_RUNS is asked for that attempt's `sleeping` (`_slept`).

Each handled event has a span continuing its trace, and each action for a run happens in a
span of the run's trace (`nexus_scheduler.tracing`): one trace from `requested` to the end.
"""

from __future__ import annotations

import asyncio
import logging
import zlib
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

import nats.errors
import nats.js.errors
from nexus_events.contract import subjects
from nexus_events.contract.codec import Decoded
from nexus_events.contract.runstate import TERMINAL_EVENTS, RunEvent
from nexus_events.contract.streams import RUNS
from nexus_events.events import (
    Reason,
    RunCancelled,
    RunDispatched,
    RunFailed,
    RunLost,
    RunQueued,
    RunResuming,
    RunSleeping,
    RunTimedOut,
    TerminalEvent,
)
from nexus_events.events.inbox import InboxMessage
from nexus_events.events.spend import SpendDecision, SpendVerdict
from nexus_events.runtime import telemetry
from nexus_events.runtime.clock import Clock, SystemClock
from nexus_events.transport.bus import Bus
from nexus_events.transport.publish_batcher import PublishBatcher

from nexus_scheduler.admission import (
    AdmissionState,
    CancelInfo,
    CancelWaiting,
    Escalate,
    Expire,
    Limits,
    Lose,
    Phase,
    Queue,
    Resume,
    Start,
    Timeouts,
    after_loss,
    decide,
    due,
)
from nexus_scheduler.liveness import Windows, may_end
from nexus_scheduler.metrics import SchedulerMetrics
from nexus_scheduler.runtime.base import AgentRuntime, RuntimeState, RuntimeStatus
from nexus_scheduler.sleep import WakeUp, decide_wakes
from nexus_scheduler.spend_admission import SpendAdmission
from nexus_scheduler.tracing import AGENT_ID, ATTEMPT, OUTCOME, RUNTIME, RunTraces

log = logging.getLogger(__name__)

# The run events admission needs; everything else on NEXUS_RUNS (turns, tools) is skipped.
WATCHED_EVENTS: tuple[RunEvent, ...] = (
    RunEvent.PREPARED,
    RunEvent.QUEUED,
    RunEvent.DISPATCHED,
    RunEvent.STARTED,
    RunEvent.HEARTBEAT,
    RunEvent.CANCEL_REQUESTED,
    RunEvent.RESUMING,
    RunEvent.BUDGET_PAUSED,
    RunEvent.BUDGET_RESUMED,
    RunEvent.SLEEPING,
    RunEvent.WAKE_REQUESTED,
    RunEvent.COMPLETED,
    RunEvent.FAILED,
    RunEvent.CANCELLED,
    RunEvent.TIMED_OUT,
    RunEvent.LOST,
)


def watched_subjects() -> tuple[str, ...]:
    return tuple(subjects.run_events_filter(event=name) for name in WATCHED_EVENTS)


def msg_id(run_id: str, event: str, attempt: int | None = None) -> str:
    """Deterministic id of an event the scheduler publishes for a run. All terminal events
    share one id, so at most one scheduler-made ending is stored per run."""
    suffix = "terminal" if event in _TERMINAL_NAMES else event
    return f"scheduler:{run_id}:{suffix}" + (f":{attempt}" if attempt is not None else "")


def budget_queued_msg_id(run_id: str, waiting_for: str) -> str:
    """Id of a `queued` for a budget: one per reason, so a changed reason is stored again
    (the plain `queued` id would be dropped as a duplicate)."""
    return f"scheduler:{run_id}:queued:budget:{zlib.crc32(waiting_for.encode()):08x}"


_TERMINAL_NAMES = frozenset(TERMINAL_EVENTS)


@dataclass
class Stats:
    started: int = 0
    queued: int = 0
    # Dispatches the spend service held back (wait) or refused (stop).
    budget_waits: int = 0
    ended: dict[str, int] = field(default_factory=dict)
    # Attempts started after a runner loss, by the reason of the loss.
    resumed: dict[str, int] = field(default_factory=dict)
    # Runs ended because their runner was lost with no attempt left.
    attempts_exhausted: int = 0
    # Sleeping runs woken, by what woke them (timer, signal, message).
    woken: dict[str, int] = field(default_factory=dict)


class SchedulerService:
    def __init__(
        self,
        bus: Bus,
        runtime: AgentRuntime,
        *,
        limits: Limits,
        timeouts: Timeouts,
        exit_grace: float = 10.0,
        clock: Clock | None = None,
        fence: Callable[[], Awaitable[bool]] | None = None,
        metrics: SchedulerMetrics | None = None,
        spend: SpendAdmission | None = None,
        budget_recheck_seconds: float = 5.0,
    ) -> None:
        self.bus = bus
        self.metrics = metrics or SchedulerMetrics()
        # Asked before side effects (dispatch, cancel, end): whether this replica still holds
        # the lease. None (tests of the service alone) means always.
        self.fence = fence
        self.runtime = runtime
        # None (tests of the service alone): every run is admitted without asking.
        self.spend = spend
        self.budget_recheck = timedelta(seconds=budget_recheck_seconds)
        self.limits = limits
        self.timeouts = timeouts
        self.exit_grace = exit_grace
        self.clock: Clock = clock or SystemClock()
        # A new leader has seen no heartbeat itself yet: runs its runtime does not know get
        # the heartbeat window from here before they are declared lost.
        self.leader_since = self.clock.now()
        self.windows = Windows(exit_grace, timeouts.heartbeat_timeout)
        self.state = AdmissionState()
        self.attach_metrics(self.metrics)
        self.traces = RunTraces()
        self.stats = Stats()
        self._lock = asyncio.Lock()
        self._gone_since: dict[str, datetime] = {}
        # Runs whose next attempt this replica is starting (never twice at once).
        self._resuming: set[str] = set()
        self._background: set[asyncio.Task[None]] = set()
        # The starts' `dispatched` events, sent together (a burst's starts run at once).
        self._dispatches = PublishBatcher(bus)

    # -- input --------------------------------------------------------------------------------

    def observe(self, decoded: Decoded, *, replay: bool = False) -> bool:
        """Fold one run event into the state. Replayed events keep their stream time."""
        run_id = decoded.address.run_id
        if run_id is None:
            return False
        at = self.clock.now()
        if replay and decoded.envelope.timestamp is not None:
            at = decoded.envelope.timestamp
        if run_id not in self.state.finished:
            self.traces.remember_headers(decoded)
        changed = self.state.evolve(run_id, decoded.event, at, stamp=decoded.envelope.timestamp)
        if run_id in self.state.finished:
            self.traces.forget(run_id)
        return changed

    async def observe_many(self, items: Iterable[Decoded]) -> None:
        """Fold live run events, each in its own span while tracing is enabled."""
        async with self._lock:
            if not telemetry.enabled():
                for decoded in items:
                    self.observe(decoded)
                return
            for decoded in items:
                with self.traces.event_span(decoded) as span:
                    changed = self.observe(decoded)
                    span.set_attribute(OUTCOME, "folded" if changed else "ignored")

    async def observe_inbox(self, items: Iterable[Decoded]) -> None:
        """Fold messages sent to runs' inboxes: one to a sleeping run wakes it at the next
        `act` (approval decisions and messages to awake runs are the runners' business)."""
        async with self._lock:
            for decoded in items:
                run_id = decoded.address.run_id
                if run_id is not None and isinstance(decoded.event, InboxMessage):
                    self.state.message(run_id, decoded.event, decoded.envelope.timestamp)

    # -- admission ----------------------------------------------------------------------------

    async def act(self) -> bool:
        """Decide on the waiting runs and carry the decisions out; False (nothing done) when
        this replica no longer holds the lease.

        Slots are taken under the lock, so concurrent calls never start a run twice; the
        runtime starts run in the background so slow starts do not hold up consumption.
        """
        if not await self._leading("admit"):
            return False
        now = self.clock.now()
        async with self._lock:
            sleepers = decide_wakes(self.state, now)
        for sleeper in sleepers:
            if isinstance(sleeper, WakeUp):
                await self._wake(sleeper)
            else:  # a cancel of a sleeping run: no runner to stop
                await self._end(sleeper.run_id, _cancelled(sleeper.cancel))
        queued: list[Queue] = []
        cancels: list[CancelWaiting] = []
        starts: list[Start] = []
        async with self._lock:
            for decision in decide(self.state, self.limits, now):
                if isinstance(decision, Start):
                    self.state.begin_start(decision.run_id)
                    starts.append(decision)
                elif isinstance(decision, Queue):
                    self.state.evolve(decision.run_id, decision.event, now)
                    queued.append(decision)
                else:
                    self.state.runs[decision.run_id].ending = True
                    cancels.append(decision)
        if queued:
            encoded = []
            for q in queued:  # each in its run's trace
                with self.traces.action(
                    "scheduler queue", q.run_id, {OUTCOME: RunEvent.QUEUED.value}
                ):
                    encoded.append(
                        self.bus.encode(
                            subjects.run_event(q.run_id, RunEvent.QUEUED),
                            q.event,
                            msg_id=msg_id(q.run_id, RunEvent.QUEUED),
                        )
                    )
            await self.bus.publish_many_encoded(encoded)
            self.stats.queued += len(queued)
        for cancel in cancels:
            await self._end(cancel.run_id, _cancelled(cancel.cancel))
        for start in starts:
            task = asyncio.create_task(self._admit(start), name=f"start:{start.run_id}")
            self._background.add(task)
            task.add_done_callback(self._background.discard)
        return True

    async def _admit(self, start: Start) -> None:
        """Ask the spend service whether a budget lets the run start (its slot is taken
        meanwhile, so no other admission gives it away), then start, hold or end it."""
        # A woken run's next attempt goes on with the budgets its run was admitted under
        # (its runner reserves each call); only a first dispatch asks.
        first = start.config.attempt == 1
        verdict = await self.spend.ask(start.run_id) if self.spend and first else None
        if verdict is None or verdict.decision is SpendDecision.GRANTED:
            await self._start(start)
        elif verdict.decision is SpendDecision.WAIT:
            await self._hold_for_budget(start.run_id, verdict)
        else:
            self.stats.budget_waits += 1
            await self._end(
                start.run_id,
                RunFailed(
                    reason=Reason.BUDGET_EXCEEDED,
                    message=verdict.message or "a budget covering the run is reached",
                ),
            )

    async def _hold_for_budget(self, run_id: str, verdict: SpendVerdict) -> None:
        """Give the slot back, report the run queued on the budget (once per reason), and
        admit again: the runs behind it may take the slot."""
        reason = verdict.message or "a budget covering the run is reached"
        now = self.clock.now()
        queued: RunQueued | None = None
        async with self._lock:
            if not self.state.hold_for_budget(run_id, now + self.budget_recheck):
                return  # ended or cancelled meanwhile
            if self.state.runs[run_id].budget_wait != reason:
                position = self.state.position(run_id)
                queued = RunQueued(position=position, limit="budget", waiting_for=reason)
                self.state.evolve(run_id, queued, now)
        self.stats.budget_waits += 1
        if queued is not None:
            with self.traces.action("scheduler queue", run_id, {OUTCOME: RunEvent.QUEUED.value}):
                await self.bus.publish(
                    subjects.run_event(run_id, RunEvent.QUEUED),
                    queued,
                    msg_id=budget_queued_msg_id(run_id, reason),
                )
            self.stats.queued += 1
        await self.act()

    async def _start(self, start: Start) -> None:
        config = start.config
        attrs = {
            AGENT_ID: config.agent_id,
            ATTEMPT: config.attempt,
            RUNTIME: getattr(self.runtime, "kind", None),
        }
        # The runtime hands the current trace context to the runner (TRACEPARENT).
        # A start runs in the background and may come after the lease was lost meanwhile.
        if not await self._leading(f"start {start.run_id}"):
            return
        with self.traces.action("scheduler dispatch", start.run_id, attrs) as span:
            try:
                handle = await self.runtime.start_run(config)
            except Exception as exc:  # any runtime failure ends the run, it must not hang
                log.exception("runtime could not start %s", start.run_id)
                if span is not None:
                    span.set_attribute(OUTCOME, "runtime_error")
                await self._end(
                    start.run_id,
                    RunFailed(reason=Reason.RUNTIME_ERROR, message=f"{type(exc).__name__}: {exc}"),
                )
                return
            event = RunDispatched(
                runtime=handle.runtime,
                handle=handle.handle,
                attempt=config.attempt,
                warm=handle.warm,
            )
            if span is not None:
                span.set_attribute(OUTCOME, RunEvent.DISPATCHED.value)
            # Encoded here, in the run's trace; sent with the other starts' (one batch per
            # round trip, not a publish each: docs/performance.md, "Dispatch burst").
            dispatched = self.bus.encode(
                subjects.run_event(start.run_id, RunEvent.DISPATCHED),
                event,
                msg_id=msg_id(start.run_id, RunEvent.DISPATCHED, config.attempt),
            )
            await self._dispatches.publish(dispatched)
        async with self._lock:
            self.state.evolve(start.run_id, event, self.clock.now())
        self.stats.started += 1

    async def _leading(self, what: str) -> bool:
        """Whether this replica still holds the lease (see `Lease.still_held`)."""
        if self.fence is None or await self.fence():
            return True
        log.warning("not the leader any more: skipping %s", what)
        return False

    async def drain(self) -> None:
        """Wait for the runtime starts in flight."""
        while self._background:
            await asyncio.gather(*list(self._background), return_exceptions=True)
        await self._dispatches.close()

    def in_flight(self) -> list[str]:
        """Names of the background tasks (runtime starts) not finished yet."""
        return [t.get_name() for t in self._background if not t.done()]

    async def abandon(self) -> None:
        """Cancel the runtime starts in flight (a stop past its drain timeout)."""
        tasks = list(self._background)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    # -- timers and runtime checks ------------------------------------------------------------

    async def tick(self) -> None:
        """Act on passed timers and on runs their runtime no longer has, then admit."""
        if not await self._leading("tick"):
            return
        now = self.clock.now()
        async with self._lock:
            actions = due(self.state, now, self.timeouts)
            for action in actions:
                self.state.runs[action.run_id].ending = True
            watched = [
                (e.run_id, e.attempt)
                for e in self.state.active()
                if e.phase in (Phase.DISPATCHED, Phase.RUNNING) and not e.ending
            ]
        for run_id in [r for r in self._gone_since if r not in self.state.runs]:
            del self._gone_since[run_id]  # ended by the runner meanwhile
        await asyncio.gather(*(self._carry_out(a) for a in actions))
        statuses = await asyncio.gather(*(self.runtime.status(r, attempt=n) for r, n in watched))
        for (run_id, attempt), status in zip(watched, statuses, strict=True):
            await self._check_runtime(run_id, attempt, status, now)
        await self.act()

    async def _carry_out(self, action: Escalate | Expire | Lose | Resume) -> None:
        if isinstance(action, Resume | Lose) and await self._slept(action.run_id):
            return  # no heartbeat because it sleeps: not a loss
        if isinstance(action, Resume):
            await self._resume(action)
            return
        await self._stop_runtime(action.run_id)
        if isinstance(action, Escalate):
            await self._end(action.run_id, _cancelled(action.cancel))
        elif isinstance(action, Expire):
            await self._end(
                action.run_id,
                RunTimedOut(
                    limit_seconds=action.limit_seconds,
                    message=f"wall-clock budget of {action.limit_seconds}s exceeded",
                ),
            )
        else:
            self._exhausted(action.reason)
            await self._end(action.run_id, RunLost(reason=action.reason, message=action.message))

    def _exhausted(self, reason: str) -> None:
        self.stats.attempts_exhausted += 1
        self.metrics.exhausted(reason)

    async def _check_runtime(  # noqa: PLR0911 - one decision on the runtime's report
        self, run_id: str, attempt: int, status: RuntimeStatus, now: datetime
    ) -> None:
        if status.live:
            self._gone_since.pop(run_id, None)
            return
        since = self._gone_since.setdefault(run_id, now)
        async with self._lock:
            entry = self.state.runs.get(run_id)
            if entry is None or entry.ending or entry.attempt != attempt:
                return
            if not may_end(
                status.state,
                now,
                not_live_since=since,
                last_seen=entry.last_seen,
                leader_since=self.leader_since,
                windows=self.windows,
            ):
                return  # the runner's own terminal event (or a heartbeat) may still come
            entry.ending = True
        if status.state is not RuntimeState.TIMED_OUT and await self._slept(run_id):
            return  # the runner exited after `sleeping`: not a loss
        async with self._lock:
            if status.state is RuntimeState.TIMED_OUT:
                decision: Escalate | Lose | Resume | None = None  # a deadline is not resumed
            else:
                decision = after_loss(entry, *loss_of(status))
        if isinstance(decision, Resume):
            await self._resume(decision)
            return
        if status.state is RuntimeState.GONE or isinstance(decision, Escalate):
            # The runtime lost track of it, not necessarily the runner of itself: whatever
            # is left must not side-effect after the terminal event. (An ended process or
            # pod has nothing to stop, and a failed Job stays for its logs.)
            await self._stop_runtime(run_id)
        if isinstance(decision, Escalate):
            await self._end(run_id, _cancelled(decision.cancel))
            return
        if isinstance(decision, Lose):
            self._exhausted(decision.reason)
            await self._end(run_id, ending_for(status, decision.message))
            return
        await self._end(run_id, ending_for(status))

    # -- sleep --------------------------------------------------------------------------------

    async def _slept(self, run_id: str) -> bool:
        """Whether the current attempt of `run_id` slept, by NEXUS_RUNS (the runtime may report
        its process gone before the consumer folds `sleeping`); if so the sleep is folded and
        the decision to end the run is undone."""
        async with self._lock:
            entry = self.state.runs.get(run_id)
            if entry is None:
                return False
            attempt = entry.attempt
        try:
            msg = await self.bus.js.get_last_msg(
                RUNS, subjects.run_event(run_id, RunEvent.SLEEPING)
            )
        except nats.js.errors.NotFoundError:
            return False
        except (nats.errors.Error, nats.js.errors.Error):
            log.warning("run %s: could not look for its `sleeping`", run_id, exc_info=True)
            return False
        sleeping = RunSleeping.model_validate_json(msg.data or b"{}")
        if sleeping.attempt != attempt:
            return False
        async with self._lock:
            entry = self.state.runs.get(run_id)
            if entry is None or entry.attempt != attempt:
                return False
            entry.ending = False
            self.state.evolve(run_id, sleeping, self.clock.now())
        self._gone_since.pop(run_id, None)
        log.info("run %s: attempt %d slept (its `sleeping` not folded yet)", run_id, attempt)
        return True

    def attach_metrics(self, metrics: SchedulerMetrics) -> None:
        """Count into `metrics`, which observes the runs asleep from this service's state."""
        self.metrics = metrics
        metrics.observe_sleeping(self.sleeping_count)

    def sleeping_count(self) -> int:
        return sum(1 for e in self.state.runs.values() if e.phase is Phase.SLEEPING)

    async def _wake(self, wake: WakeUp) -> None:
        """Publish `resuming` for the attempt after the sleep (its id makes it one per
        attempt, whoever publishes it) and fold it: the run waits for a slot again."""
        run_id = wake.run_id
        if not await self._leading(f"wake {run_id}"):
            async with self._lock:
                entry = self.state.runs.get(run_id)
                if entry is not None:
                    entry.waking = False
            return
        cause = wake.wake.cause.value
        event = RunResuming(
            attempt=wake.attempt,
            reason=Reason.WOKE,
            message=f"woke ({cause}) from a sleep until {wake.wake.slept_until.isoformat()}",
            wake=wake.wake,
        )
        try:
            with self.traces.action(
                "scheduler wake", run_id, {ATTEMPT: wake.attempt, OUTCOME: Reason.WOKE}
            ):
                await self.bus.publish(
                    subjects.run_event(run_id, RunEvent.RESUMING),
                    event,
                    msg_id=msg_id(run_id, RunEvent.RESUMING, wake.attempt),
                )
        except BaseException:
            async with self._lock:  # not woken: the next act decides it again
                entry = self.state.runs.get(run_id)
                if entry is not None:
                    entry.waking = False
            raise
        async with self._lock:
            self.state.evolve(run_id, event, self.clock.now())
        self.stats.woken[cause] = self.stats.woken.get(cause, 0) + 1
        self.metrics.woke(cause)
        log.info("run %s woke (%s): attempt %d waits for a slot", run_id, cause, wake.attempt)

    # -- attempts -----------------------------------------------------------------------------

    async def _resume(self, resume: Resume) -> None:
        """Stop what is left of the lost attempt, publish `resuming`, start the next one.

        The old attempt is stopped before anything is published: once `resuming` is stored
        a new leader may start the next attempt, and two runners of one run must never
        side-effect at once.
        """
        run_id = resume.run_id
        if not await self._leading(f"resume {run_id}"):
            return
        await self._stop_runtime(run_id, resume.attempt - 1)
        async with self._lock:
            entry = self.state.runs.get(run_id)
            if entry is None:
                return  # ended meanwhile (the runner's own terminal event came late)
            cancel = entry.cancel
        if cancel is not None:
            await self._end(run_id, _cancelled(cancel))  # a cancel wins over a new attempt
            return
        event = RunResuming(attempt=resume.attempt, reason=resume.reason, message=resume.message)
        with self.traces.action(
            "scheduler resume", run_id, {ATTEMPT: resume.attempt, OUTCOME: resume.reason}
        ):
            await self.bus.publish(
                subjects.run_event(run_id, RunEvent.RESUMING),
                event,
                msg_id=msg_id(run_id, RunEvent.RESUMING, resume.attempt),
            )
        async with self._lock:
            self.state.evolve(run_id, event, self.clock.now())
        self._gone_since.pop(run_id, None)
        self.stats.resumed[resume.reason] = self.stats.resumed.get(resume.reason, 0) + 1
        self.metrics.resumed(resume.reason, resume.attempt)
        log.warning(
            "run %s: runner lost (%s: %s); starting attempt %d",
            run_id,
            resume.reason,
            resume.message,
            resume.attempt,
        )
        await self._start_attempt(run_id)

    async def _start_attempt(self, run_id: str) -> None:
        """Start the attempt a `resuming` announced (its `dispatched` not seen yet), unless a
        cancel came meanwhile: then the run ends cancelled and no attempt starts."""
        async with self._lock:
            entry = self.state.runs.get(run_id)
            if entry is None or entry.phase is not Phase.STARTING or run_id in self._resuming:
                return
            cancel = entry.cancel
            if cancel is not None:
                entry.ending = True
            else:
                self._resuming.add(run_id)
                config = entry.attempt_config()
        if cancel is not None:
            await self._end(run_id, _cancelled(cancel))
            return
        try:
            await self._start(Start(run_id, config))
        finally:
            self._resuming.discard(run_id)

    async def _stop_runtime(self, run_id: str, attempt: int | None = None) -> None:
        """Stop `attempt` of the run (None: the current one)."""
        if attempt is None:
            entry = self.state.runs.get(run_id)
            attempt = entry.attempt if entry is not None else 1
        try:
            await self.runtime.cancel_run(run_id, attempt=attempt)
        except Exception:  # the run ends either way; the runtime's GC is the backstop
            log.exception("runtime could not stop %s", run_id)

    async def _end(self, run_id: str, event: TerminalEvent) -> None:
        """Publish a scheduler-made terminal event (once per run) and free the slot."""
        async with self._lock:
            if run_id in self.state.finished:
                return
        if not await self._leading(f"end {run_id}"):
            return
        with self.traces.action("scheduler end", run_id, {OUTCOME: event.event_name}):
            await self.bus.publish(
                subjects.run_event(run_id, type(event)),
                event,
                msg_id=msg_id(run_id, "terminal"),
            )
        async with self._lock:
            self.state.evolve(run_id, event, self.clock.now())
            if run_id in self.state.finished:
                self.traces.forget(run_id)
        self._gone_since.pop(run_id, None)
        self.stats.ended[event.event_name] = self.stats.ended.get(event.event_name, 0) + 1

    # -- start-up -----------------------------------------------------------------------------

    async def recover(self) -> list[str]:
        """After a rebuild: re-adopt the dispatched/running runs whose runtime still has them,
        and start the attempts a previous leader announced (`resuming`) but did not dispatch.

        Nothing is declared lost here: a run the runtime does not know is ended by `tick`
        only after the heartbeat window (`nexus_scheduler.liveness`), so a restart never
        ends work that is still going on. Returns the run ids re-adopted.
        """
        async with self._lock:
            candidates = [
                (e.run_id, e.attempt)
                for e in self.state.active()
                if e.phase in (Phase.DISPATCHED, Phase.RUNNING) and not e.ending
            ]
            pending = [(r, self.state.runs[r].attempt) for r in self.state.pending_attempts()]
        for run_id, attempt in pending:
            log.warning(
                "run %s: attempt %d was announced, not started: starting it", run_id, attempt
            )
            # The announcing leader stopped the previous attempt before `resuming`; stopping
            # it again is a no-op, and cheap insurance against two runners at once.
            await self._stop_runtime(run_id, attempt - 1)
            task = asyncio.create_task(self._start_attempt(run_id), name=f"start:{run_id}")
            self._background.add(task)
            task.add_done_callback(self._background.discard)
        statuses = await asyncio.gather(*(self.runtime.status(r, attempt=n) for r, n in candidates))
        adopted = []
        for (run_id, _), status in zip(candidates, statuses, strict=True):
            if status.live:
                adopted.append(run_id)
                log.info("re-adopted run %s (%s)", run_id, status.state.value)
            else:
                log.warning(
                    "run %s has no live runtime (%s: %s); lost unless it shows life within %gs",
                    run_id,
                    status.state.value,
                    status.message or status.reason or "-",
                    self.windows.heartbeat_timeout,
                )
        return adopted


def _cancelled(cancel: CancelInfo) -> RunCancelled:
    return RunCancelled(reason=cancel.reason, cancelled_by=cancel.requested_by)


def loss_of(status: RuntimeStatus) -> tuple[str, str]:
    """(reason, message) of a runner whose runtime stopped without it saying how."""
    detail = _detail(status)
    if status.state is RuntimeState.FAILED:
        return Reason.RUNTIME_ERROR, detail
    return Reason.RUNTIME_GONE, f"runtime reports {detail}"


def ending_for(status: RuntimeStatus, message: str | None = None) -> TerminalEvent:
    """The terminal event for a run whose runtime stopped without the runner saying how;
    `message` (attempts spent) replaces the runtime's own."""
    if status.state is RuntimeState.TIMED_OUT:
        return RunTimedOut(message=f"runtime deadline: {_detail(status)}")
    reason, detail = loss_of(status)
    if reason == Reason.RUNTIME_ERROR:
        return RunFailed(
            reason=reason,
            message=message or detail,
            detail={"runtime_reason": status.reason} if status.reason else {},
        )
    return RunLost(reason=reason, message=message or detail)


def _detail(status: RuntimeStatus) -> str:
    parts = [p for p in (status.reason, status.message) if p]
    return ": ".join(parts) or status.state.value
