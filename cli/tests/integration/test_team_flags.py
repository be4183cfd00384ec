"""`--team` on `nexus run`, `nexus flow run` and `nexus task create` (docs/spend.md, Teams):
the request or task as stored on a real nats-server names the team; a bad team is one line,
exit 2, nothing published."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from nexus_events.contract import subjects
from nexus_events.contract.streams import FLOWS, RUNS, TASKS
from nexus_events.events import FlowRequested, RunRequested, TaskCreated
from nexus_events.transport.bus import Bus
from tests.support.cli import nexus

from .test_flow_runs_cli import one_error_line


async def _stored(bus: Bus, stream: str, subject: str) -> list[object]:
    return [d.event async for d in bus.replay(stream, filter_subject=subject)]


async def test_each_request_names_its_team(bus: Bus, nats_url: str, tmp_path: Path) -> None:
    run = await nexus(
        nats_url, tmp_path, "run", "implementer", "--team", "alpha", "--run-id", "run_t", "--bg"
    )
    assert run.exit_code == 0, run.output
    [request] = await _stored(bus, RUNS, subjects.run_events_filter("run_t"))
    assert isinstance(request, RunRequested)
    assert request.team == "alpha"

    flow = await nexus(nats_url, tmp_path, "flow", "run", "feature", "--team", "beta", "-o", "json")
    assert flow.exit_code == 0, flow.output
    fid = json.loads(flow.stdout)["flow_run_id"]
    [flow_request] = await _stored(bus, FLOWS, subjects.flow_events_filter(fid))
    assert isinstance(flow_request, FlowRequested)
    assert flow_request.team == "beta"

    task = await nexus(
        nats_url, tmp_path, "task", "create", "Fix", "--id", "T-9", "--team", "gamma"
    )
    assert task.exit_code == 0, task.output
    [created] = await _stored(bus, TASKS, subjects.task_events_filter("T-9"))
    assert isinstance(created, TaskCreated)
    assert created.team == "gamma"


@pytest.mark.parametrize(
    "args",
    [
        ("run", "implementer", "--bg"),
        ("flow", "run", "feature"),
        ("task", "create", "Fix"),
    ],
)
async def test_a_bad_team_is_one_line_and_nothing_published(
    bus: Bus, nats_url: str, tmp_path: Path, args: tuple[str, ...]
) -> None:
    result = await nexus(nats_url, tmp_path, *args, "--team", "a b")
    assert result.exit_code == 2, result.output
    one_error_line(result.stderr, "invalid team 'a b'")
    for stream in (RUNS, FLOWS, TASKS):
        assert await _stored(bus, stream, ">") == []
