"""Fires schedules: folds NEXUS_SCHEDULES, and on each tick publishes the due fires.

A fire is a `requested` run event for the schedule's agent and task, then a `fired`
schedule event recording the nominal time. Both carry ids derived from schedule id +
nominal time, and a restarted scheduler resumes from the last `fired`, so no fire is
requested twice.
"""

from __future__ import annotations

import logging
from datetime import datetime

from nexus_events import subjects
from nexus_events.bus import Bus, decode_msg
from nexus_events.codec import Decoded
from nexus_events.errors import DecodeError
from nexus_events.events import (
    Origin,
    RunRequested,
    ScheduleDefined,
    ScheduleFired,
    ScheduleRemoved,
)
from nexus_events.streams import SCHEDULES

from nexus_scheduler.clock import Clock, SystemClock
from nexus_scheduler.schedule import (
    MissedPolicy,
    ScheduleState,
    fire_msg_id,
    plan,
    run_id_for,
)

log = logging.getLogger(__name__)


class ScheduleService:
    def __init__(
        self,
        bus: Bus,
        *,
        jitter_cap: float,
        misfire_grace: float,
        policy: MissedPolicy = "skip",
        clock: Clock | None = None,
    ) -> None:
        self.bus = bus
        self.jitter_cap = jitter_cap
        self.misfire_grace = misfire_grace
        self.policy: MissedPolicy = policy
        self.clock: Clock = clock or SystemClock()
        self.schedules: dict[str, ScheduleState] = {}
        self.missed: dict[str, list[datetime]] = {}

    def observe(self, decoded: Decoded, *, replay: bool = False) -> None:
        schedule_id = decoded.address.ids.get("schedule_id")
        if schedule_id is None:
            return
        at = self.clock.now()
        if replay and decoded.envelope.timestamp is not None:
            at = decoded.envelope.timestamp
        event = decoded.event
        if isinstance(event, ScheduleDefined):
            existing = self.schedules.get(schedule_id)
            state = ScheduleState(schedule_id, event, defined_at=at)
            if existing is not None:  # a redefinition keeps the fire history
                state.defined_at = existing.defined_at
                state.last_nominal = existing.last_nominal
                state.fired_runs = existing.fired_runs
            self.schedules[schedule_id] = state
        elif isinstance(event, ScheduleRemoved):
            self.schedules.pop(schedule_id, None)
        elif isinstance(event, ScheduleFired):
            state_ = self.schedules.get(schedule_id)
            if state_ is not None:
                if state_.last_nominal is None or event.scheduled_for > state_.last_nominal:
                    state_.last_nominal = event.scheduled_for
                if event.run_id not in state_.fired_runs:
                    state_.fired_runs.append(event.run_id)

    async def load(self) -> int:
        """Rebuild from the whole NEXUS_SCHEDULES stream; return how many events were read."""
        count = 0
        async for msg in self.bus.replay_raw(SCHEDULES):
            try:
                self.observe(decode_msg(msg), replay=True)
            except DecodeError:
                continue
            count += 1
        return count

    async def tick(self) -> list[str]:
        """Publish every due fire; return the run ids requested."""
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
                log.warning(
                    "schedule fires missed",
                    extra={"schedule_id": state.schedule_id, "missed": len(p.missed)},
                )
                self.missed.setdefault(state.schedule_id, []).extend(p.missed)
                state.skipped_until = max(p.missed)
            for nominal in p.fire:
                requested.append(await self._fire(state, nominal))
        return requested

    async def _fire(self, state: ScheduleState, nominal: datetime) -> str:
        defn = state.definition
        run_id = run_id_for(state.schedule_id, nominal)
        msg_id = fire_msg_id(state.schedule_id, nominal)
        request = RunRequested(
            agent_id=defn.agent_id,
            task_id=defn.task_id,
            input=defn.input,
            origin=Origin.SCHEDULE,
            requested_by=f"schedule:{state.schedule_id}",
            labels={"schedule_id": state.schedule_id, "scheduled_for": nominal.isoformat()},
        )
        await self.bus.publish(subjects.run_event(run_id, "requested"), request, msg_id=msg_id)
        await self.bus.publish(
            subjects.schedule_event(state.schedule_id, "fired"),
            ScheduleFired(run_id=run_id, scheduled_for=nominal),
            msg_id=f"{msg_id}:fired",
        )
        state.last_nominal = nominal
        state.fired_runs.append(run_id)
        return run_id
