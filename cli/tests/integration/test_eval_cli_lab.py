"""`nexus eval` against the real lab (services/lab), core and PostgreSQL on a real nats-server:
apply a suite, `eval run --wait` two agent revisions (a stand-in runner ends each case run
core prepared, passing the cases its revision is scripted to pass), then `eval show` renders
the lab's report and `eval ls-runs` lists it; an unknown eval run is exit 3."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import asyncpg
import pytest
from nats.aio.msg import Msg
from nexus_core.app import CoreApp
from nexus_events.contract import codec, subjects
from nexus_events.contract.runstate import RunEvent
from nexus_events.events import RunCompleted, RunRequested, RunResult
from nexus_events.transport.bus import Bus
from nexus_events.transport.catalog_commands import apply_agent
from nexus_lab.app import LabApp
from nexus_lab.config import LabSettings
from nexus_testing import eventually
from tests.support.cli import nexus

from .test_flow_runs_cli import one_error_line

AGENT = """
id: impl
role: implementer
model: {name: test-model}
system_prompt: "You implement tasks, take {n}."
tools: [read_file]
"""
SUITE = """
id: two-cases
graders:
  - kind: details_match
    field: ok
    equals: true
cases:
  - {id: easy, input: do the easy one}
  - {id: hard, input: do the hard one}
"""
# Revision 1 passes the easy case only; revision 2 both: the hard case flips.
PASSING = {1: {"easy"}, 2: {"easy", "hard"}}


@pytest.fixture
async def lab(bus: Bus, pg_pool: asyncpg.Pool[Any], core: CoreApp) -> AsyncIterator[LabApp]:
    app = LabApp(LabSettings(health_port=None, fetch_timeout=0.2), bus=bus, pool=pg_pool)
    await app.start()
    try:
        yield app
    finally:
        await app.stop()


@contextlib.asynccontextmanager
async def stand_in_runner(bus: Bus) -> AsyncIterator[list[str]]:
    """Ends each case run the lab requests, once core has prepared it, as its revision's
    script says (`details.ok`); yields the run ids it ended."""
    ended: list[str] = []
    tasks: set[asyncio.Task[None]] = set()

    async def known(run_id: str) -> bool:
        msg = await bus.nc.request(
            subjects.CORE_RUNS_GET, json.dumps({"run_id": run_id}).encode(), timeout=5
        )
        return not (msg.headers or {}).get("Nats-Service-Error-Code")

    async def end(run_id: str, request: RunRequested) -> None:
        await eventually(lambda: known(run_id), within=20, what=f"core prepared {run_id}")
        ok = request.labels.get("case") in PASSING.get(request.agent_revision or 0, set())
        result = RunResult(summary="done", details={"ok": ok}, tests_passed=True)
        await bus.publish(
            subjects.run_event(run_id, RunEvent.COMPLETED),
            RunCompleted(result=result, tokens_in=100, tokens_out=10, cost_usd=0.01),
        )
        ended.append(run_id)

    async def on_request(msg: Msg) -> None:
        d = codec.decode(msg.subject, msg.data, msg.headers)
        if isinstance(d.event, RunRequested):
            task = asyncio.create_task(end(d.address.ids["run_id"], d.event))
            tasks.add(task)
            task.add_done_callback(tasks.discard)

    sub = await bus.nc.subscribe(
        subjects.run_events_filter(None, RunEvent.REQUESTED), cb=on_request
    )
    try:
        yield ended
    finally:
        await sub.unsubscribe()
        for task in list(tasks):
            task.cancel()


async def test_run_wait_show_and_ls_runs_against_the_lab(
    bus: Bus, lab: LabApp, nats_url: str, tmp_path: Path
) -> None:
    for n in (1, 2):
        await apply_agent(bus, AGENT.replace("{n}", str(n)))
    suite = tmp_path / "two-cases.yaml"
    suite.write_text(SUITE)
    applied = await nexus(nats_url, tmp_path, "eval", "apply", str(suite))
    assert applied.exit_code == 0, applied.output

    async with stand_in_runner(bus) as ended:
        result = await nexus(
            nats_url, tmp_path, "--timeout", "20", "eval", "run", "two-cases",
            "-a", "impl@1", "-a", "impl@2", "--trials", "2", "--wait", "--wait-for", "120",
            "-o", "json",
        )  # fmt: skip
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["status"] == "completed"
    assert len(ended) == 8  # 2 cases x 2 revisions x 2 trials
    rates = {(r["revision"], r["passed"], r["graded"]) for r in report["revisions"]}
    assert rates == {(1, 2, 4), (2, 4, 4)}
    assert report["flipped"] == ["hard"]
    eval_run_id = report["eval_run_id"]

    shown = await nexus(nats_url, tmp_path, "eval", "show", eval_run_id)
    assert shown.exit_code == 0, shown.output
    lines = shown.stdout.splitlines()
    assert lines[0] == f"eval run {eval_run_id}: suite two-cases@1 completed (8/8 case runs graded)"
    assert "flipped: hard" in lines
    rows = {tuple(line.split()[:3]) for line in lines}
    assert {("impl@1", "2/4", "50%"), ("impl@2", "4/4", "100%")} <= rows
    assert {("hard", "impl@1", "0/2"), ("hard", "impl@2", "2/2")} <= rows

    listed = await nexus(nats_url, tmp_path, "eval", "ls-runs", "-o", "json")
    assert [e["eval_run_id"] for e in json.loads(listed.stdout)["evals"]] == [eval_run_id]

    unknown = await nexus(nats_url, tmp_path, "eval", "show", "ev-nope")
    assert unknown.exit_code == 3, unknown.output
    one_error_line(unknown.stderr, "no eval run 'ev-nope'")
