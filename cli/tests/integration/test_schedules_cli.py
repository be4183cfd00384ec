"""`nexus schedule add|ls|show|pause|resume|rm` on a real nats-server: each command is an event
on NEXUS_SCHEDULES that the scheduler folds (its ScheduleService fires what the CLI defined),
and `ls`/`show` fold the same stream back; bad input is one error line and a non-zero exit."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from nexus_events.contract import subjects
from nexus_events.contract.streams import FLOWS, SCHEDULES
from nexus_events.events import (
    FlowRequested,
    ScheduleDefined,
    ScheduleFired,
    ScheduleMissed,
    ScheduleRemoved,
)
from nexus_events.events.base import Event
from nexus_events.runtime.clock import ManualClock
from nexus_events.transport.bus import Bus
from nexus_scheduler.schedules_service import ScheduleService
from tests.support.cli import nexus

from nexus_cli.client import whoami

from .test_flow_runs_cli import one_error_line

FIRED_FOR = datetime(2026, 1, 5, 3, 0, tzinfo=UTC)


async def schedule_events(bus: Bus, schedule_id: str) -> list[Event]:
    flt = f"nexus.schedule.v1.{schedule_id}.*"
    return [d.event async for d in bus.replay(SCHEDULES, filter_subject=flt)]


async def listed(nats_url: str, tmp_path: Path) -> dict[str, dict[str, Any]]:
    result = await nexus(nats_url, tmp_path, "schedule", "ls", "-o", "json")
    assert result.exit_code == 0, result.output
    return {s["schedule_id"]: s for s in json.loads(result.stdout)["schedules"]}


async def test_add_ls_show_pause_resume_rm_round_trip_through_the_stream(
    bus: Bus, nats_url: str, tmp_path: Path
) -> None:
    added = await nexus(
        nats_url, tmp_path, "schedule", "add", "nightly", "--flow", "feature",
        "--cron", "0 3 * * 1-5", "--timezone", "Europe/Paris", "--task", "T-1",
        "--input", "nightly build", "--overlap", "skip", "--missed", "catch_up_one",
    )  # fmt: skip
    assert added.exit_code == 0, added.output
    assert "schedule nightly defined: flow feature, cron 0 3 * * 1-5 (Europe/Paris)" in added.stdout
    [defined] = await schedule_events(bus, "nightly")
    assert isinstance(defined, ScheduleDefined)
    assert (defined.flow, defined.agent_id, defined.cron, defined.timezone) == (
        "feature",
        None,
        "0 3 * * 1-5",
        "Europe/Paris",
    )
    assert (defined.task_id, defined.input, defined.enabled) == ("T-1", "nightly build", True)
    assert (defined.overlap_policy, defined.missed_policy) == ("skip", "catch_up_one")

    again = await nexus(
        nats_url, tmp_path, "schedule", "add", "nightly", "--agent", "a", "--every", "60"
    )
    assert again.exit_code == 2
    one_error_line(again.stderr, "schedule 'nightly' exists")

    # What the scheduler records, as `show` and `ls` read it back.
    fire = ScheduleFired(run_id="sched-nightly-1", scheduled_for=FIRED_FOR)
    miss = ScheduleMissed(scheduled_for=FIRED_FOR + timedelta(days=1), reason="overlap: x")
    await bus.publish(subjects.schedule_event("nightly", "fired"), fire)
    await bus.publish(subjects.schedule_event("nightly", "missed"), miss)
    shown = await nexus(nats_url, tmp_path, "schedule", "show", "nightly", "-o", "json")
    assert shown.exit_code == 0, shown.output
    data = json.loads(shown.stdout)
    assert data["fires"] == [
        {"scheduled_for": fire.scheduled_for.isoformat(), "run_id": "sched-nightly-1"}
    ]
    assert [m["reason"] for m in data["misses"]] == ["overlap: x"]
    table = await nexus(nats_url, tmp_path, "schedule", "show", "nightly")
    assert "fired    2026-01-05T03:00:00+00:00  sched-nightly-1" in table.stdout
    [last_fire] = (await listed(nats_url, tmp_path))["nightly"]["fires"]
    assert last_fire == data["fires"][0]

    paused = await nexus(nats_url, tmp_path, "schedule", "pause", "nightly")
    assert paused.exit_code == 0, paused.output
    last = (await schedule_events(bus, "nightly"))[-1]
    assert isinstance(last, ScheduleDefined)
    assert last.enabled is False
    assert last.model_dump(exclude={"enabled"}) == defined.model_dump(exclude={"enabled"})
    table_ls = await nexus(nats_url, tmp_path, "schedule", "ls")
    [row] = [line for line in table_ls.stdout.splitlines() if line.startswith("nightly")]
    assert "paused" in row.split()

    resumed = await nexus(nats_url, tmp_path, "schedule", "resume", "nightly")
    assert resumed.exit_code == 0, resumed.output
    last = (await schedule_events(bus, "nightly"))[-1]
    assert isinstance(last, ScheduleDefined)
    assert last.enabled is True

    removed = await nexus(nats_url, tmp_path, "schedule", "rm", "nightly")
    assert removed.exit_code == 0, removed.output
    last = (await schedule_events(bus, "nightly"))[-1]
    assert isinstance(last, ScheduleRemoved)
    assert last.removed_by == whoami()
    assert await listed(nats_url, tmp_path) == {}
    gone = await nexus(nats_url, tmp_path, "schedule", "show", "nightly")
    assert gone.exit_code == 3
    one_error_line(gone.stderr, "no schedule 'nightly'")


async def test_an_agent_s_own_schedule_shows_its_maker_and_an_operator_pauses_it(
    bus: Bus, nats_url: str, tmp_path: Path
) -> None:
    made = ScheduleDefined(
        agent_id="implementer",
        interval_seconds=600,
        input="poll CI",
        created_by_run="run-maker",
        created_by_agent="implementer",
    )
    await bus.publish(subjects.schedule_event("agent-implementer-1", "defined"), made)
    row = (await listed(nats_url, tmp_path))["agent-implementer-1"]
    assert row["definition"]["created_by_run"] == "run-maker"
    shown = await nexus(nats_url, tmp_path, "schedule", "show", "agent-implementer-1")
    assert "by       implementer (run run-maker)" in shown.stdout
    paused = await nexus(nats_url, tmp_path, "schedule", "pause", "agent-implementer-1")
    assert paused.exit_code == 0, paused.output
    last = (await schedule_events(bus, "agent-implementer-1"))[-1]
    assert isinstance(last, ScheduleDefined)
    # Paused, still the agent's: the scheduler keeps counting it against the agent's cap.
    assert (last.enabled, last.created_by_run, last.created_by_agent) == (
        False,
        "run-maker",
        "implementer",
    )


async def test_the_scheduler_fires_a_flow_schedule_the_cli_defined_until_it_is_paused(
    bus: Bus, nats_url: str, tmp_path: Path
) -> None:
    added = await nexus(
        nats_url, tmp_path, "schedule", "add", "tick", "--flow", "feature", "--every", "600",
        "--task", "T-2",
    )  # fmt: skip
    assert added.exit_code == 0, added.output
    clock = ManualClock()
    svc = ScheduleService(bus, jitter_cap=0, misfire_grace=300, clock=clock)
    await svc.load()
    clock.set(svc.schedules["tick"].defined_at + timedelta(seconds=600))
    [flow_run_id] = await svc.tick()
    requests = [d async for d in bus.replay(FLOWS)]
    assert [d.address.ids["flow_run_id"] for d in requests] == [flow_run_id]
    request = requests[0].event
    assert isinstance(request, FlowRequested)
    assert (request.flow, request.task_id) == ("feature", "T-2")

    assert (await nexus(nats_url, tmp_path, "schedule", "pause", "tick")).exit_code == 0
    restarted = ScheduleService(bus, jitter_cap=0, misfire_grace=300, clock=clock)
    await restarted.load()
    clock.advance(600)
    assert await restarted.tick() == []
    shown = await nexus(nats_url, tmp_path, "schedule", "show", "tick", "-o", "json")
    assert json.loads(shown.stdout)["fire_count"] == 1
    assert json.loads(shown.stdout)["fires"][0]["run_id"] == flow_run_id


async def test_bad_input_is_one_error_line_and_a_non_zero_exit(
    bus: Bus, nats_url: str, tmp_path: Path
) -> None:
    cases = [
        (["add", "s", "--agent", "a", "--flow", "f", "--every", "5"], 2, "exactly one of --agent"),
        (["add", "s", "--every", "5"], 2, "exactly one of --agent, --flow"),
        (["add", "s", "--agent", "a"], 2, "exactly one of --cron, --every, --at"),
        (["add", "s", "--agent", "a", "--cron", "61 * * * *"], 2, "invalid cron expression"),
        (["add", "s", "--agent", "a", "--cron", "* * * *"], 2, "invalid cron expression"),
        (
            ["add", "s", "--agent", "a", "--cron", "0 3 * * *", "--timezone", "Mars/Base"],
            2,
            "unknown time zone 'Mars/Base'",
        ),
        (["add", "s", "--agent", "a", "--at", "tomorrow"], 2, "invalid --at 'tomorrow'"),
        (["add", "s", "--agent", "a", "--every", "9", "--timezone", "Nowhere"], 2, "time zone"),
        (["add", "s", "--agent", "a", "--at", "2020-01-01T00:00Z"], 2, "is in the past"),
        (
            ["add", "s", "--agent", "a", "--every", "5", "--overlap", "later"],
            2,
            "invalid --overlap",
        ),
        (["add", "bad id", "--agent", "a", "--every", "5"], 2, "invalid schedule id"),
        (["pause", "nope"], 3, "no schedule 'nope'"),
        (["resume", "nope"], 3, "no schedule 'nope'"),
        (["rm", "nope"], 3, "no schedule 'nope'"),
    ]
    for args, code, text in cases:
        result = await nexus(nats_url, tmp_path, "schedule", *args)
        assert result.exit_code == code, (args, result.output)
        one_error_line(result.stderr, text)
    assert [d async for d in bus.replay(SCHEDULES)] == []  # nothing was published
