"""`nexus board` shows a task's delegated runs under it, against a real core on a real
nats-server and PostgreSQL."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from nexus_core.app import CoreApp
from nexus_events.contract import subjects
from nexus_events.events import Column, RunCompleted, RunResult, RunStarted, TaskCreated
from nexus_events.transport.bus import Bus
from nexus_events.transport.catalog_commands import apply_agent
from nexus_testing import eventually
from tests.support.cli import nexus

AGENT = "id: {id}\nrole: {id}\nmodel: {{name: test-model}}\nsystem_prompt: You {id}.\n"


async def _request(bus: Bus, run_id: str, agent: str, parent: str | None = None) -> None:
    body = {"agent_id": agent, "task_id": "T-9", "input": "go", "parent_run_id": parent}
    await bus.js.publish(
        subjects.run_event(run_id, "requested"),
        json.dumps({k: v for k, v in body.items() if v is not None}).encode(),
    )


async def test_board_lists_delegated_runs_under_their_task(
    core: CoreApp, bus: Bus, nats_url: str, tmp_path: Path
) -> None:
    for agent in ("implementer", "reviewer", "tester"):
        await apply_agent(bus, AGENT.format(id=agent))
    await eventually(core.catalog_fresh, what="catalog applied")
    await bus.publish(
        subjects.task_event("T-9", "created"), TaskCreated(title="Fix", column=Column.TODO)
    )
    await _request(bus, "run_root", "implementer")
    await bus.publish(subjects.run_event("run_root", "started"), RunStarted())
    await _request(bus, "run_review", "reviewer", parent="run_root")
    await _request(bus, "run_test", "tester", parent="run_review")
    await bus.publish(
        subjects.run_event("run_test", "completed"), RunCompleted(result=RunResult(summary="ok"))
    )

    async def board() -> dict[str, Any] | None:
        result = await nexus(nats_url, tmp_path, "board", "-o", "json")
        assert result.exit_code == 0, result.output
        [task] = json.loads(result.stdout)["tasks"] or [None]
        statuses = {c["run_id"]: c["status"] for c in (task or {}).get("child_runs", [])}
        done = statuses == {"run_review": "prepared", "run_test": "completed"}
        return task if done else None

    task = await eventually(board, within=20, what="both children on the board")
    assert (task["column"], task["current_run"]["run_id"]) == ("in_progress", "run_root")

    shown = await nexus(nats_url, tmp_path, "board")
    assert shown.exit_code == 0, shown.output
    # The in_progress panel, cut out of the row of panels by its left edge.
    rows = shown.stdout.splitlines()
    left = rows[0].index("╭─ in_progress")
    panel = [r[left:].split("│")[1].strip() for r in rows[1:] if r[left:].startswith("│")]
    assert panel == [
        "T-9 Fix",
        "run_root running",
        "↳ reviewer  run_review  prepared",
        "↳ tester  run_test  completed",
    ]
    # The grandchild sits deeper than the child it came from.
    raw = shown.stdout.splitlines()
    review, test = (next(r for r in raw if name in r) for name in ("run_review", "run_test"))
    assert test.index("↳") == review.index("↳") + 2
