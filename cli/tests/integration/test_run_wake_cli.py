"""`nexus run wake` and `nexus ps` for a sleeping run, on a real nats-server and a real core:
the sleeping run shows its wake time, a wake is published as `wake_requested` (requested_by
whoami); an unknown run and a run that does not sleep get one line and a non-zero exit."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

from nexus_core.app import CoreApp
from nexus_events.contract import subjects
from nexus_events.contract.runstate import RunStatus
from nexus_events.contract.streams import RUNS
from nexus_events.events import (
    ModelSpec,
    RunConfig,
    RunDispatched,
    RunPrepared,
    RunSleeping,
    RunStarted,
    RunWakeRequested,
)
from nexus_events.transport.bus import Bus
from nexus_testing import eventually
from tests.support.cli import nexus

from .lab_recordings import get_run


async def _run(bus: Bus, run_id: str, *, sleep_until: datetime | None = None) -> None:
    config = RunConfig(run_id=run_id, agent_id="a", system_prompt="p", model=ModelSpec(name="m"))
    events = [RunPrepared(config=config), RunDispatched(runtime="local", handle="1"), RunStarted()]
    if sleep_until is not None:
        events.append(RunSleeping(until=sleep_until, reason="CI", attempt=1, turn=2))
    for event in events:
        await bus.publish(subjects.run_event(run_id, event.event_name), event)
    status = RunStatus.SLEEPING if sleep_until else RunStatus.RUNNING

    async def shown() -> bool:
        return (await get_run(bus, run_id)).get("status") == status

    await eventually(shown, what=f"{run_id} {status}")


async def _wakes(bus: Bus) -> list[tuple[str, RunWakeRequested]]:
    found = []
    filter_subject = subjects.run_events_filter(event="wake_requested")
    async for d in bus.replay(RUNS, filter_subject=filter_subject):
        assert isinstance(d.event, RunWakeRequested)
        found.append((str(d.address.run_id), d.event))
    return found


async def test_ps_shows_the_wake_time_and_run_wake_wakes_only_a_sleeping_run(
    core: CoreApp, bus: Bus, nats_url: str, tmp_path: Path
) -> None:
    until = datetime.now(UTC) + timedelta(minutes=30)
    await _run(bus, "run_s", sleep_until=until)
    await _run(bus, "run_a")
    row = await get_run(bus, "run_s")
    assert datetime.fromisoformat(row["sleeping_until"]) == until
    assert row["sleep_reason"] == "CI"

    ps = await nexus(nats_url, tmp_path, "ps")
    assert ps.exit_code == 0, ps.output
    line = next(x for x in ps.stdout.splitlines() if "run_s" in x)
    assert f"sleeping until {until.astimezone().strftime('%H:%M')}" in line
    assert "(in 29m" in line or "(in 30m" in line

    awake = await nexus(nats_url, tmp_path, "run", "wake", "run_a")
    assert awake.exit_code == 1
    assert awake.stderr.strip().splitlines()[0] == "error: run run_a is not sleeping: running"
    unknown = await nexus(nats_url, tmp_path, "run", "wake", "run_none")
    assert unknown.exit_code == 3
    assert "no run 'run_none'" in unknown.stderr
    assert await _wakes(bus) == []

    woke = await nexus(
        nats_url, tmp_path, "run", "wake", "run_s", "--reason", "CI is green", "-o", "json"
    )
    assert woke.exit_code == 0, woke.output
    assert json.loads(woke.stdout)["wake_requested"] is True
    [(run_id, wake)] = await _wakes(bus)
    assert (run_id, wake.reason) == ("run_s", "CI is green")
    assert wake.requested_by
