"""Schedules as pure functions: nominal fire times, deterministic jitter, missed fires.

A schedule (cron, fixed interval or one-shot) has *nominal* fire times; each fire happens at
nominal + jitter, where the jitter is derived from the schedule id (so retries and restarts
never move it). Fires whose time passed more than `misfire_grace` ago are *missed*: the
`skip` policy drops them, `catch_up_one` fires the latest of them once. The schedule's own
`missed_policy` / `overlap_policy` win over the scheduler's defaults.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Literal
from zoneinfo import ZoneInfo

from croniter import croniter
from nexus_events.events import ScheduleDefined

MissedPolicy = Literal["skip", "catch_up_one"]
OverlapPolicy = Literal["skip", "queue", "cancel_previous"]
# Upper bound of nominal times walked in one evaluation (a minutely cron down for a week
# is 10k): past it the older ones are dropped as missed without being listed.
MAX_WALK = 20_000


def jitter(schedule_id: str, cap_seconds: float) -> timedelta:
    """A fixed offset in [0, cap) derived from the schedule id."""
    if cap_seconds <= 0:
        return timedelta(0)
    digest = hashlib.blake2b(schedule_id.encode(), digest_size=8).digest()
    fraction = int.from_bytes(digest, "big") / 2**64
    return timedelta(seconds=round(fraction * cap_seconds, 3))


def next_nominal(defn: ScheduleDefined, anchor: datetime, after: datetime) -> datetime | None:
    """The first nominal fire time strictly after `after` (None: the schedule is over).

    `anchor` is when the schedule was defined: intervals count from it.
    """
    if defn.at is not None:
        at = defn.at if defn.at.tzinfo else defn.at.replace(tzinfo=UTC)
        return at if at > after else None
    if defn.interval_seconds is not None:
        step = timedelta(seconds=defn.interval_seconds)
        if after < anchor:
            return anchor + step
        periods = (after - anchor) // step + 1
        return anchor + periods * step
    assert defn.cron is not None
    local = after.astimezone(ZoneInfo(defn.timezone))
    nxt: datetime = croniter(defn.cron, local).get_next(datetime)
    return nxt.astimezone(UTC)


@dataclass
class ScheduleState:
    schedule_id: str
    definition: ScheduleDefined
    defined_at: datetime
    last_nominal: datetime | None = None  # latest nominal time fired (from `fired` events)
    skipped_until: datetime | None = None  # latest nominal time given up on (`missed` events)
    fired_runs: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Plan:
    fire: list[datetime]  # nominal times to fire now
    missed: list[datetime]  # nominal times given up on


def plan(
    state: ScheduleState,
    now: datetime,
    *,
    jitter_cap: float,
    misfire_grace: float,
    policy: MissedPolicy = "skip",
) -> Plan:
    """Which nominal times are due at `now`: on time ones fire, missed ones follow the
    schedule's own `missed_policy`, or `policy` (the scheduler's default) when it has none."""
    if not state.definition.enabled:
        return Plan([], [])
    policy = state.definition.missed_policy or policy
    offset = jitter(state.schedule_id, jitter_cap)
    grace = timedelta(seconds=misfire_grace)
    cursor = max(t for t in (state.last_nominal, state.skipped_until, state.defined_at) if t)
    on_time: list[datetime] = []
    missed: list[datetime] = []
    for _ in range(MAX_WALK):
        nominal = next_nominal(state.definition, state.defined_at, cursor)
        if nominal is None or nominal + offset > now:
            break
        (missed if now - (nominal + offset) > grace else on_time).append(nominal)
        cursor = nominal
    if policy == "catch_up_one" and missed and not on_time:
        return Plan([missed[-1]], missed[:-1])
    return Plan(on_time, missed)


def run_id_for(schedule_id: str, nominal: datetime) -> str:
    """The run a fire requests: the same for every retry of the same fire."""
    return f"sched-{schedule_id}-{nominal.astimezone(UTC):%Y%m%dT%H%M%S}"[:128]


def fire_msg_id(schedule_id: str, nominal: datetime) -> str:
    """Nats-Msg-Id of a fire: schedule id + nominal time, so no replica fires it twice."""
    return f"schedule:{schedule_id}:{nominal.astimezone(UTC).isoformat()}"
