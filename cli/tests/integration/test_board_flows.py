"""`nexus board` shows each task's flow run and its current step, asked of the flows service
(a small responder here) beside a real core on a real nats-server and PostgreSQL; without the
flows service the board still prints, with a note."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from nexus_core.app import CoreApp
from nexus_events.contract import subjects
from nexus_events.events import Column, TaskCreated
from nexus_events.events.flows import FlowRunView, FlowStatus
from nexus_events.transport.bus import Bus
from nexus_testing import eventually
from tests.support.cli import nexus

from .flows_responder import flows_service


async def test_board_shows_the_flow_of_each_task_and_tolerates_no_flows_service(
    core: CoreApp, bus: Bus, nats_url: str, tmp_path: Path
) -> None:
    for task_id in ("T-1", "T-2"):
        await bus.publish(
            subjects.task_event(task_id, "created"),
            TaskCreated(title=f"Task {task_id}", column=Column.TODO),
        )

    async def board() -> dict[str, Any] | None:
        result = await nexus(nats_url, tmp_path, "board", "-o", "json")
        assert result.exit_code == 0, result.output
        data: dict[str, Any] = json.loads(result.stdout)
        return data if len(data["tasks"]) == 2 else None

    data = await eventually(board, within=20, what="both tasks on the board")
    assert data["flows_note"] == "flows: the flows service is not running (no flow column)"
    assert [t["flow"] for t in data["tasks"]] == [None, None]
    plain = await nexus(nats_url, tmp_path, "board")
    assert plain.exit_code == 0, plain.output
    assert "T-1" in plain.stdout
    assert "the flows service is not running" in plain.stdout

    views = [
        FlowRunView(flow_run_id="fr_old", flow="feature", status=FlowStatus.FAILED, task_id="T-1"),
        FlowRunView(
            flow_run_id="fr_new",
            flow="feature",
            status=FlowStatus.WAITING,
            task_id="T-1",
            current_step="ship",
        ),
    ]
    async with flows_service(bus, views) as flows:
        shown = await nexus(nats_url, tmp_path, "board", "-o", "json")
        table = await nexus(nats_url, tmp_path, "board")
    assert shown.exit_code == 0, shown.output
    by_task = {t["task_id"]: t for t in json.loads(shown.stdout)["tasks"]}
    assert by_task["T-1"]["flow"]["flow_run_id"] == "fr_new"  # the newest of the task's runs
    assert by_task["T-2"]["flow"] is None
    assert json.loads(shown.stdout)["flows_note"] is None
    assert {q.task_id for q in flows.list_queries} == {"T-1", "T-2"}
    assert "flow feature: ship (waiting)" in table.stdout
    assert "not running" not in table.stdout
