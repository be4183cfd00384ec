"""`nexus diff A B` on two runs recorded on a real nats-server and projected by a real core:
the turns side by side, the first difference marked, the totals with B's difference."""

from __future__ import annotations

import json
from pathlib import Path

from nexus_core.app import CoreApp
from nexus_events.contract.runstate import RunStatus
from nexus_events.events import Reason, RunFailed
from nexus_events.transport.bus import Bus
from tests.support.cli import nexus

from .lab_recordings import Step, apply_lab_agent, completed, projected, record_run

WRITE = Step("write_file", {"path": "notes/a.txt", "content": "one"})
READ = Step("read_file", {"path": "notes/a.txt"}, output="one")


async def _two_runs(core: CoreApp, bus: Bus) -> None:
    await apply_lab_agent(bus, core.catalog_fresh)
    await record_run(bus, "run_a", [[WRITE], [READ], [Step("finish")]], completed(3))
    changed_read = Step("read_file", {"path": "notes/a.txt"}, output="two")
    failed = RunFailed(reason=Reason.BUDGET_EXCEEDED, tokens_in=80, tokens_out=40, cost_usd=0.004)
    steps = [[WRITE], [changed_read], [Step("run_shell", {"command": "ls"})], [Step("finish")]]
    await record_run(bus, "run_b", steps, failed, tokens=20)
    await projected(bus, "run_a", RunStatus.COMPLETED, 3)
    await projected(bus, "run_b", RunStatus.FAILED, 4)


async def test_diff_json_names_the_first_difference_and_the_totals(
    core: CoreApp, bus: Bus, nats_url: str, tmp_path: Path
) -> None:
    await _two_runs(core, bus)
    result = await nexus(nats_url, tmp_path, "diff", "run_a", "run_b", "--json")
    assert result.exit_code == 0, result.output
    diff = json.loads(result.stdout)
    assert diff["first_difference"] == 2
    verdicts = [(t["number"], t["calls_match"], t["results_match"]) for t in diff["turns"]]
    assert verdicts == [(1, True, True), (2, True, False), (3, False, True), (4, False, False)]
    assert diff["turns"][2]["a"] == [{"tool": "finish", "arguments": {}, "ok": True}]
    assert diff["turns"][3]["a"] == []
    totals = diff["totals"]
    assert totals["turns"] == {"a": 3, "b": 4, "difference": 1}
    assert totals["tool calls"] == {"a": 3, "b": 4, "difference": 1}
    assert totals["tokens in"] == {"a": 30, "b": 80, "difference": 50}
    assert totals["outcome"]["a"] == "completed (succeeded)"
    assert totals["outcome"]["b"] == "failed (budget_exceeded)"
    assert totals["wall seconds"]["a"] >= 0


async def test_diff_table_marks_the_first_differing_turn(
    core: CoreApp, bus: Bus, nats_url: str, tmp_path: Path
) -> None:
    await _two_runs(core, bus)
    result = await nexus(nats_url, tmp_path, "diff", "run_a", "run_b")
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    [marked] = [line for line in lines if "◀ first difference" in line]
    assert marked.lstrip().startswith("2 ")
    assert "results differ" in marked
    assert "first difference at turn 2" in result.stdout
    same = await nexus(nats_url, tmp_path, "diff", "run_a", "run_a")
    assert "every turn matched" in same.stdout
    missing = await nexus(nats_url, tmp_path, "diff", "run_a", "run_nope")
    assert missing.exit_code == 3, missing.output
    assert "no run 'run_nope'" in missing.stderr
