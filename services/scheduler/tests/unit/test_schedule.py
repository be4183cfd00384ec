from __future__ import annotations

from datetime import UTC, datetime, timedelta

from nexus_events.events import ScheduleDefined
from nexus_scheduler.schedule import (
    ScheduleState,
    fire_msg_id,
    jitter,
    next_nominal,
    plan,
    run_id_for,
)

T0 = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)  # a Monday


def test_jitter_is_deterministic_bounded_and_spread() -> None:
    assert jitter("nightly", 60) == jitter("nightly", 60)
    values = {jitter(f"s{i}", 60) for i in range(50)}
    assert all(timedelta(0) <= v < timedelta(seconds=60) for v in values)
    assert len(values) > 40
    assert jitter("nightly", 0) == timedelta(0)


def test_cron_next_in_its_timezone() -> None:
    defn = ScheduleDefined(agent_id="a", cron="30 9 * * 1-5", timezone="Europe/Berlin")
    # 09:30 Berlin (UTC+1 in March before DST) is 08:30 UTC
    assert next_nominal(defn, T0, T0 - timedelta(hours=2)) == datetime(
        2026, 3, 2, 8, 30, tzinfo=UTC
    )
    # after Friday's fire comes Monday's
    friday = datetime(2026, 3, 6, 8, 30, tzinfo=UTC)
    assert next_nominal(defn, T0, friday) == datetime(2026, 3, 9, 8, 30, tzinfo=UTC)


def test_interval_counts_from_definition_and_one_shot_fires_once() -> None:
    every = ScheduleDefined(agent_id="a", interval_seconds=600)
    assert next_nominal(every, T0, T0) == T0 + timedelta(minutes=10)
    assert next_nominal(every, T0, T0 + timedelta(minutes=25)) == T0 + timedelta(minutes=30)
    once = ScheduleDefined(agent_id="a", at=T0 + timedelta(hours=1))
    assert next_nominal(once, T0, T0) == T0 + timedelta(hours=1)
    assert next_nominal(once, T0, T0 + timedelta(hours=1)) is None


def test_plan_fires_at_nominal_plus_jitter_only() -> None:
    state = ScheduleState("hourly", ScheduleDefined(agent_id="a", cron="0 * * * *"), T0)
    offset = jitter("hourly", 120)
    nominal = T0 + timedelta(hours=1)
    before = plan(state, nominal + offset - timedelta(seconds=1), jitter_cap=120, misfire_grace=60)
    assert before.fire == []
    at = plan(state, nominal + offset, jitter_cap=120, misfire_grace=60)
    assert at.fire == [nominal]
    state.last_nominal = nominal  # what the `fired` event records
    assert plan(state, nominal + offset, jitter_cap=120, misfire_grace=60).fire == []


def test_missed_fires_skip_or_catch_up_one() -> None:
    defn = ScheduleDefined(agent_id="a", cron="0 * * * *")
    state = ScheduleState("s", defn, T0)
    later = T0 + timedelta(hours=5, minutes=30)  # down for 5 fires
    skip = plan(state, later, jitter_cap=0, misfire_grace=60, policy="skip")
    assert skip.fire == []
    assert skip.missed == [T0 + timedelta(hours=h) for h in range(1, 6)]
    catch_up = plan(state, later, jitter_cap=0, misfire_grace=60, policy="catch_up_one")
    assert catch_up.fire == [T0 + timedelta(hours=5)]
    assert len(catch_up.missed) == 4
    # a fire due within the grace is on time, and the missed ones before it are dropped
    edge = plan(state, T0 + timedelta(hours=5, seconds=30), jitter_cap=0, misfire_grace=60)
    assert edge.fire == [T0 + timedelta(hours=5)]
    assert len(edge.missed) == 4


def test_disabled_schedule_never_fires() -> None:
    defn = ScheduleDefined(agent_id="a", interval_seconds=60, enabled=False)
    assert (
        plan(
            ScheduleState("s", defn, T0), T0 + timedelta(hours=1), jitter_cap=0, misfire_grace=60
        ).fire
        == []
    )


def test_fire_ids_are_schedule_id_plus_nominal_time() -> None:
    nominal = T0 + timedelta(hours=1)
    assert run_id_for("nightly", nominal) == "sched-nightly-20260302T100000"
    assert fire_msg_id("nightly", nominal) == "schedule:nightly:2026-03-02T10:00:00+00:00"


def test_schedule_missed_policy_wins_over_the_default() -> None:
    own = ScheduleDefined(agent_id="a", interval_seconds=600, missed_policy="catch_up_one")
    state = ScheduleState("s", own, defined_at=T0)
    now = T0 + timedelta(hours=1, minutes=5)  # 6 nominal times passed, all beyond the grace
    p = plan(state, now, jitter_cap=0, misfire_grace=60, policy="skip")
    assert p.fire == [T0 + timedelta(hours=1)]
    assert len(p.missed) == 5
    skipper = ScheduleState("s", own.model_copy(update={"missed_policy": "skip"}), T0)
    p = plan(skipper, now, jitter_cap=0, misfire_grace=60, policy="catch_up_one")
    assert (p.fire, len(p.missed)) == ([], 6)
    default = ScheduleState("s", own.model_copy(update={"missed_policy": None}), T0)
    assert plan(default, now, jitter_cap=0, misfire_grace=60, policy="skip").fire == []
