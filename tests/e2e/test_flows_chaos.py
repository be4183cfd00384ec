"""Issue 28's chaos acceptance: SIGKILL the flows service, the scheduler and core at random
moments while 30 flows (a run, then a timer wait) run on the real dev stack
(`nexus dev up --offline-model`, whose supervisor restarts them); from the streams: no step
started twice, none lost, every flow terminal with a reason. The logic is
scripts/chaos_flows.py (its 100-flow version is `uv run python -m scripts.chaos_flows`); the
checks it makes are tested on hand-made streams first, so a broken checker cannot pass the
chaos test vacuously.

The stack is this module's own (not the package's shared one): killing core and the scheduler
under the other end-to-end tests would make them flaky.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from scripts import chaos_flows
from tests.e2e.conftest import Stack, e2e_env
from tests.support import devstack

FLOWS = 30
# One run, then a 0.5 s wait: a hand-off per flow, and a timer the flows service must keep
# across its kills, for 30 runner processes instead of 60 (the 100-flow script runs three
# run steps, its --steps).
STEPS = 1
TIMER = 0.5
KILLS = 2  # per service: 6 SIGKILLs in all, spread over the flows' life


@pytest.fixture(scope="module")
def chaos_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[devstack.Stack]:
    tmp = tmp_path_factory.mktemp("chaos")
    env = e2e_env(tmp)
    # The end-to-end Stack: its leak check at teardown covers runners too.
    yield from devstack.running(Stack(tmp / ".nexus", tmp, env), "--offline-model")


# The 30 flows' runs start a Python runner each, ~2 s of CPU apiece (measured: docs/flows.md,
# Chaos).
@pytest.mark.timeout(420)
def test_kill_9_flows_scheduler_and_core_over_30_flows(chaos_stack: Stack, tmp_path: Path) -> None:
    def nexus(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "nexus_cli", *args],
            env=chaos_stack.env,
            cwd=chaos_stack.cwd,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    figures = asyncio.run(
        chaos_flows.run_chaos(
            chaos_stack.home,
            nexus,
            tmp_path,
            flows=FLOWS,
            steps=STEPS,
            timer=TIMER,
            seed=28,
            kills=KILLS,
            wait=330,
        )
    )
    # Runners that outlived a killed scheduler are noted too: teardown checks none is left.
    chaos_stack.remember_processes()
    report = "\n".join(figures.lines())
    print(report)
    assert figures.kills == dict.fromkeys(chaos_flows.KILLED, KILLS), report
    assert all(figures.restarts[s] >= KILLS for s in chaos_flows.KILLED), report
    assert not figures.not_terminal, report
    assert not figures.bad_terminal, report
    assert not figures.duplicates, report
    # Every step run's `requested` stored once, however often flows restarted (issue 36).
    assert not figures.rerequested, report
    assert not figures.lost, report
    assert not figures.dead_letters, report  # a kill must not make a valid event undeliverable
    assert sum(figures.outcomes.values()) == FLOWS, report
    assert figures.runs >= FLOWS, report  # every flow started at least its first step's run


# The checker, on streams written by hand.


def _flow(fid: str, name: str, **body: Any) -> tuple[str, dict[str, Any]]:
    return f"nexus.flow.v1.{fid}.{name}", body


def _run(run_id: str, name: str, **body: Any) -> tuple[str, dict[str, Any]]:
    return f"nexus.agent.run.v1.{run_id}.{name}", body


def _healthy(fid: str) -> tuple[list[Any], list[Any]]:
    flow = [_flow(fid, "requested", flow="chaos"), _flow(fid, "accepted", flow="chaos")]
    runs = []
    for step in "abc":
        run_id = f"{fid}-{step}-r1"
        flow += [
            _flow(fid, "step_started", step=step, round=1, kind="run", run_id=run_id),
            _flow(fid, "step_finished", step=step, round=1, status="succeeded", run_id=run_id),
        ]
        runs += [
            _run(run_id, "requested"),
            _run(run_id, "prepared"),
            _run(run_id, "dispatched", attempt=1),
            _run(run_id, "started"),
            _run(run_id, "completed", reason="success"),
        ]
    flow.append(_flow(fid, "completed", reason="succeeded"))
    return flow, runs


def _checked(flow: list[Any], runs: list[Any], ids: list[str]) -> chaos_flows.Figures:
    figures = chaos_flows.Figures(flows=len(ids), seed=0)
    chaos_flows.check(figures, ids, flow, runs)
    return figures


def test_checker_passes_clean_streams() -> None:
    flow, runs = _healthy("f1")
    figures = _checked(flow, runs, ["f1"])
    assert figures.ok
    assert figures.outcomes == {"completed/succeeded": 1}
    assert figures.runs == 3
    assert figures.run_outcomes == {"completed": 3}


def test_checker_finds_a_step_started_twice() -> None:
    flow, runs = _healthy("f1")
    # A second run id for the same step key, and a run started twice in one attempt.
    flow.insert(3, _flow("f1", "step_started", step="a", round=1, kind="run", run_id="other"))
    runs.append(_run("f1-b-r1", "started"))
    figures = _checked(flow, runs, ["f1"])
    assert not figures.ok
    assert any("run ids ['f1-a-r1', 'other']" in d for d in figures.duplicates)
    assert any("f1-b-r1 started 2 times" in d for d in figures.duplicates)


def test_checker_allows_a_second_attempt_but_not_a_second_prepare() -> None:
    flow, runs = _healthy("f1")
    runs += [_run("f1-a-r1", "dispatched", attempt=2), _run("f1-a-r1", "started")]
    assert _checked(flow, runs, ["f1"]).ok
    runs.append(_run("f1-c-r1", "prepared"))
    figures = _checked(flow, runs, ["f1"])
    assert figures.duplicates == ["f1 step c round 1: run f1-c-r1 prepared 2 times"]


def test_checker_finds_a_run_requested_twice() -> None:
    flow, runs = _healthy("f1")
    runs.insert(1, _run("f1-b-r1", "requested"))
    figures = _checked(flow, runs, ["f1"])
    assert not figures.ok
    assert figures.rerequested == ["f1 step b round 1: run f1-b-r1 requested 2 times"]
    assert not figures.duplicates


def test_checker_finds_lost_steps_and_stuck_flows() -> None:
    flow, runs = _healthy("f1")
    # The run of step b ended, but the flow never noted it and never ended.
    flow = [m for m in flow if not (m[1].get("step") in ("b", "c") or "completed" in m[0])]
    flow.append(_flow("f1", "step_started", step="b", round=1, kind="run", run_id="f1-b-r1"))
    figures = _checked(flow, runs, ["f1", "f2"])
    assert figures.lost == ["f1 step b round 1: run f1-b-r1 ended=True, no step_finished"]
    assert [n.split(":")[0] for n in figures.not_terminal] == ["f1", "f2"]
    # A step whose run core never prepared is lost too.
    flow2, runs2 = _healthy("f3")
    runs2 = [m for m in runs2 if m[0] != "nexus.agent.run.v1.f3-a-r1.prepared"]
    assert _checked(flow2, runs2, ["f3"]).lost == [
        "f3 step a round 1: run f3-a-r1 never prepared by core"
    ]


def test_checker_wants_one_terminal_event_with_a_reason() -> None:
    flow, runs = _healthy("f1")
    flow.append(_flow("f1", "failed", reason="step_failed"))
    assert _checked(flow, runs, ["f1"]).bad_terminal
    flow, runs = _healthy("f2")
    flow[-1] = _flow("f2", "failed", reason="")
    assert _checked(flow, runs, ["f2"]).bad_terminal
