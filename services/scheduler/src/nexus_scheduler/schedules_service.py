"""Fires schedules: folds NEXUS_SCHEDULES, and on each tick publishes the due fires.

A fire is a `requested` run event for the schedule's agent and task (or, for a schedule with
a `flow`, a `requested` flow event on NEXUS_FLOWS), then a `fired` schedule event recording
the nominal time. All carry ids derived from schedule id + nominal time, and a restarted
scheduler resumes from the last `fired`, so no fire is requested twice.

A fire given up on publishes a `missed` schedule event (also with a deterministic id), which
a restarted scheduler folds so it does not reconsider the fire: reason `missed` for a fire
later than the misfire grace (downtime) under the `skip` policy, reason `overlap` for a fire
that came while the schedule's previous run was still active under the `skip` overlap policy.
Overlap policies (the schedule's own, else the scheduler's default): `queue` requests the run
anyway (admission queues it under the limits like any run), `skip` records the fire missed,
`cancel_previous` publishes `cancel_requested` for the previous run, then fires. For a flow
schedule "previous run" is the previous flow run (active until NEXUS_FLOWS holds its
completed/failed/cancelled); `queue` starts the new flow run at once, since flows have no
admission queue of their own (their step runs are admitted under the limits like any run).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from datetime import datetime

from nexus_events.contract import subjects
from nexus_events.contract.codec import Decoded
from nexus_events.contract.runstate import TERMINAL_EVENTS, RunEvent
from nexus_events.contract.streams import FLOWS, RUNS, SCHEDULES
from nexus_events.errors import DecodeError
from nexus_events.events import (
    CancelRequested,
    FlowCancelRequested,
    FlowRequested,
    Origin,
    Reason,
    RunRequested,
    ScheduleDefined,
    ScheduleFired,
    ScheduleMissed,
    ScheduleRemoved,
)
from nexus_events.events.flows import FLOW_TERMINAL, FlowEvent
from nexus_events.runtime.clock import Clock, SystemClock
from nexus_events.transport.bus import Bus, Outgoing, decode_msg
from nexus_events.transport.run_requests import request_flow, request_run

from nexus_scheduler.schedule import (
    MissedPolicy,
    OverlapPolicy,
    ScheduleState,
    fire_msg_id,
    plan,
    run_id_for,
)

log = logging.getLogger(__name__)
# Who asks, in the message id of a fire's request: the run id is derived from the schedule
# and the nominal time (`run_id_for`), so every replica's retry of one fire is one message.
SOURCE = "schedule"

# Reason of the `cancel_requested` a `cancel_previous` fire publishes for the previous run.
SUPERSEDED = Reason.SUPERSEDED
# At most this many `missed` events per schedule and tick (the latest ones); a minutely cron
# down for a week would otherwise publish 10k. The first one published says how many more.
MAX_MISSED_EVENTS = 100

RunActive = Callable[[str], Awaitable[bool]]
Fence = Callable[[], Awaitable[bool]]


class ScheduleService:
    def __init__(
        self,
        bus: Bus,
        *,
        jitter_cap: float,
        misfire_grace: float,
        policy: MissedPolicy = "skip",
        overlap: OverlapPolicy = "queue",
        clock: Clock | None = None,
        run_active: RunActive | None = None,
        flow_active: RunActive | None = None,
        fence: Fence | None = None,
    ) -> None:
        self.bus = bus
        self.jitter_cap = jitter_cap
        self.misfire_grace = misfire_grace
        self.policy: MissedPolicy = policy
        self.overlap: OverlapPolicy = overlap
        self.clock: Clock = clock or SystemClock()
        # Whether a run (requested by a fire) has not ended yet; reads NEXUS_RUNS by default.
        self.run_active: RunActive = run_active or self._run_active_in_stream
        # The same for a flow run (a flow schedule's fires); reads NEXUS_FLOWS by default.
        self.flow_active: RunActive = flow_active or self._flow_active_in_stream
        # Asked before each side effect (a fire, a `missed`, a `cancel_previous`): whether
        # this replica still holds the scheduler lease. None (the service alone) means always.
        self.fence = fence
        self.schedules: dict[str, ScheduleState] = {}
        self.missed: dict[str, list[datetime]] = {}
        self.last_seq = 0

    def observe(self, decoded: Decoded, *, replay: bool = False) -> None:
        schedule_id = decoded.address.ids.get("schedule_id")
        if schedule_id is None:
            return
        at = self.clock.now()
        if replay and decoded.envelope.timestamp is not None:
            at = decoded.envelope.timestamp
        event = decoded.event
        if isinstance(event, ScheduleDefined):
            self.define(schedule_id, event, at)
        elif isinstance(event, ScheduleRemoved):
            self.remove(schedule_id)
        elif isinstance(event, ScheduleMissed):
            missed_state = self.schedules.get(schedule_id)
            if missed_state is not None and (
                missed_state.skipped_until is None
                or event.scheduled_for > missed_state.skipped_until
            ):
                missed_state.skipped_until = event.scheduled_for
        elif isinstance(event, ScheduleFired):
            state_ = self.schedules.get(schedule_id)
            if state_ is not None:
                if state_.last_nominal is None or event.scheduled_for > state_.last_nominal:
                    state_.last_nominal = event.scheduled_for
                if event.run_id not in state_.fired_runs:
                    state_.fired_runs.append(event.run_id)

    def define(self, schedule_id: str, event: ScheduleDefined, at: datetime) -> None:
        """Fold a `defined` (also what the leader itself just published for an agent, before
        its consumer folds it again: a redefinition is idempotent)."""
        existing = self.schedules.get(schedule_id)
        state = ScheduleState(schedule_id, event, defined_at=at)
        if existing is not None:  # a redefinition keeps the fire history
            state.defined_at = existing.defined_at
            state.last_nominal = existing.last_nominal
            # ...but an agent schedule turned flow (or back) has no previous run of the
            # new kind: its old run would be looked for in the wrong stream, never end,
            # and make the `skip` overlap policy skip every fire.
            if (existing.definition.flow is None) == (event.flow is None):
                state.fired_runs = existing.fired_runs
        self.schedules[schedule_id] = state

    def remove(self, schedule_id: str) -> None:
        self.schedules.pop(schedule_id, None)

    async def load(self) -> int:
        """Rebuild from the whole NEXUS_SCHEDULES stream; return how many events were read.

        `last_seq` is then the stream sequence of the last message read (0: none).
        """
        count = 0
        async for msg in self.bus.replay_raw(SCHEDULES):
            self.last_seq = max(self.last_seq, msg.metadata.sequence.stream)
            try:
                self.observe(decode_msg(msg), replay=True)
            except DecodeError:
                continue
            count += 1
        return count

    async def tick(self) -> list[str]:
        """Publish every due fire (and the `missed` ones); return the run ids requested.

        Nothing is published once this replica no longer holds the lease (checked right
        before each publish): the leader that took it over fires them instead.
        """
        now = self.clock.now()
        requested: list[str] = []
        for state in list(self.schedules.values()):
            p = plan(
                state,
                now,
                jitter_cap=self.jitter_cap,
                misfire_grace=self.misfire_grace,
                policy=self.policy,
            )
            if p.missed:
                if not await self._leading(state.schedule_id):
                    return requested
                log.warning(
                    "schedule fires missed",
                    extra={"schedule_id": state.schedule_id, "missed": len(p.missed)},
                )
                await self._record_missed(state, p.missed, now)
            for nominal in p.fire:
                run_id = await self._fire_unless_overlapping(state, nominal)
                if run_id is not None:
                    requested.append(run_id)
        return requested

    async def _leading(self, schedule_id: str) -> bool:
        if self.fence is None or await self.fence():
            return True
        log.warning(
            "not the leader any more: not firing schedules", extra={"schedule_id": schedule_id}
        )
        return False

    async def _record_missed(
        self, state: ScheduleState, missed: list[datetime], now: datetime
    ) -> None:
        recorded = missed[-MAX_MISSED_EVENTS:]
        untold = len(missed) - len(recorded)
        items = []
        for i, nominal in enumerate(recorded):
            reason = f"missed: due {nominal.isoformat()}, scheduler back at {now.isoformat()}"
            if i == 0 and untold:
                reason += f" ({untold} earlier fires also missed)"
            items.append(
                Outgoing(
                    subjects.schedule_event(state.schedule_id, "missed"),
                    ScheduleMissed(scheduled_for=nominal, reason=reason),
                    msg_id=f"{fire_msg_id(state.schedule_id, nominal)}:missed",
                )
            )
        await self.bus.publish_many(items)
        self.missed.setdefault(state.schedule_id, []).extend(missed)
        state.skipped_until = max(missed)

    async def _fire_unless_overlapping(self, state: ScheduleState, nominal: datetime) -> str | None:
        """Fire `nominal` under the overlap policy; None when the fire is skipped."""
        overlap: OverlapPolicy = state.definition.overlap_policy or self.overlap
        previous = state.fired_runs[-1] if state.fired_runs else None
        is_flow = state.definition.flow is not None
        active = self.flow_active if is_flow else self.run_active
        if overlap == "queue" or previous is None or not await active(previous):
            return await self._fire(state, nominal)
        # Reading the previous run's end took a replay: the lease may have gone meanwhile.
        if not await self._leading(state.schedule_id):
            return None
        msg_id = fire_msg_id(state.schedule_id, nominal)
        if overlap == "skip":
            log.info(
                "schedule fire skipped: previous run active",
                extra={"schedule_id": state.schedule_id, "run_id": previous},
            )
            await self.bus.publish(
                subjects.schedule_event(state.schedule_id, "missed"),
                ScheduleMissed(
                    scheduled_for=nominal, reason=f"overlap: previous run {previous} still active"
                ),
                msg_id=f"{msg_id}:missed",
            )
            self.missed.setdefault(state.schedule_id, []).append(nominal)
            state.skipped_until = nominal
            return None
        # cancel_previous: the scheduler's cancellation path ends it `cancelled` (a flow run:
        # the flows service cancels its live step runs, then the flow).
        by = f"schedule:{state.schedule_id}"
        if is_flow:
            await self.bus.publish(
                subjects.flow_event(previous, FlowCancelRequested),
                FlowCancelRequested(reason=SUPERSEDED, requested_by=by),
                msg_id=f"{msg_id}:cancel_previous",
            )
        else:
            await self.bus.publish(
                subjects.run_event(previous, RunEvent.CANCEL_REQUESTED),
                CancelRequested(reason=SUPERSEDED, requested_by=by),
                msg_id=f"{msg_id}:cancel_previous",
            )
        return await self._fire(state, nominal)

    async def _run_active_in_stream(self, run_id: str) -> bool:
        """A fired run is active until NEXUS_RUNS holds a terminal event of it."""
        filters = [subjects.run_events_filter(run_id, name) for name in TERMINAL_EVENTS]
        ended = False
        async for _ in self.bus.replay_raw(RUNS, filter_subjects=filters):
            ended = True
        return not ended

    async def _flow_active_in_stream(self, flow_run_id: str) -> bool:
        """A fired flow run is active until NEXUS_FLOWS holds a terminal event of it."""
        filters = [subjects.flow_events_filter(flow_run_id, FlowEvent(s)) for s in FLOW_TERMINAL]
        ended = False
        async for _ in self.bus.replay_raw(FLOWS, filter_subjects=filters):
            ended = True
        return not ended

    async def _fire(self, state: ScheduleState, nominal: datetime) -> str | None:
        if not await self._leading(state.schedule_id):
            return None
        defn = state.definition
        # A flow run id is derived the same way as a run id (its own stream, its own ids).
        run_id = run_id_for(state.schedule_id, nominal)
        msg_id = fire_msg_id(state.schedule_id, nominal)
        by = f"schedule:{state.schedule_id}"
        labels = {"schedule_id": state.schedule_id, "scheduled_for": nominal.isoformat()}
        if defn.flow is not None:
            flow = FlowRequested(
                flow=defn.flow,
                task_id=defn.task_id,
                input=defn.input,
                origin=Origin.SCHEDULE,
                requested_by=by,
                labels=labels,
            )
            await request_flow(self.bus, run_id, flow, source=SOURCE)
        else:
            assert defn.agent_id is not None  # ScheduleDefined holds exactly one of the two
            request = RunRequested(
                agent_id=defn.agent_id,
                task_id=defn.task_id,
                input=defn.input,
                origin=Origin.SCHEDULE,
                requested_by=by,
                labels=labels,
            )
            await request_run(self.bus, run_id, request, source=SOURCE)
        await self.bus.publish(
            subjects.schedule_event(state.schedule_id, "fired"),
            ScheduleFired(run_id=run_id, scheduled_for=nominal),
            msg_id=f"{msg_id}:fired",
        )
        state.last_nominal = nominal
        state.fired_runs.append(run_id)
        return run_id
