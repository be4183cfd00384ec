"""Issues 24 and 36's acceptance: SIGKILL the runner of 20 scripted runs each, anywhere from
its start (in its clone, before any tool call) to its last tool call, on the real stack
(NATS, PostgreSQL, the scheduler's local runtime, the real runner, the offline model's
scripts; every run clones a repository): 14 run the `resume` script, 6 are read-only agents
(planner, reviewer, tester), which never checkpoint. At least 19 complete, each with at most
one repeated tool call and at most 110 % of the model calls of its script uninterrupted (a
control run beside them), none ends `runner_error`; a killed run of an agent with
`resume.max_attempts: 1` ends `lost` with the reason.
The logic is scripts/chaos_resume.py (`uv run python -m scripts.chaos_resume` runs 100); its
checks are tested on hand-made streams first, so a broken checker cannot pass vacuously.

The stack is the package's shared one (tests/e2e/conftest.py), not a module-own one as the
flows chaos test has: only runners are killed here, which the stack outlives by design (its
services never notice but through the scheduler's runtime), and the shared stack already
has the quick timings detection needs (a 1 s exit grace, 0.2 s ticks, 2 s heartbeats). That
saves the ~20 s of a second stack start. New dead letters are counted from the DLQ's
sequence at the start, so the poison another test published there is not ours.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from scripts import chaos_resume as cr
from tests.e2e.conftest import Stack

RUNS = 20
LOST_RUNS = 1  # one killed run of a max_attempts=1 agent: it ends lost


@pytest.mark.timeout(300)
def test_kill_9_runners_anywhere_in_20_runs(stack: Stack, tmp_path: Path) -> None:
    def nexus(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "nexus_cli", *args],
            env=stack.env,
            cwd=stack.cwd,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    figures = asyncio.run(
        cr.run_chaos(stack.home, nexus, tmp_path, runs=RUNS, seed=24, lost_runs=LOST_RUNS, wait=240)
    )
    stack.remember_processes()  # teardown checks no runner outlived its run
    report = "\n".join(figures.lines())
    print(report)
    assert not figures.not_terminal, report
    assert not figures.problems, report  # the control run took the script's 11 model calls
    assert figures.killed == RUNS + LOST_RUNS, report  # a kill after the run ended: nothing
    assert figures.completed >= 19, report
    assert not [c for c in figures.checks.values() if "runner_error" in c.outcome], report
    read_only = [c for r, c in figures.checks.items() if cr.run_kind(r) is not None]
    assert len(read_only) == 6, report
    assert all(c.attempts == 2 for c in read_only), report  # each killed, each resumed
    # Some kills landed before the first tool call (the runner's start, turn 0).
    assert figures.kill_turns[0] > 0, report
    assert not figures.failures(), report  # repeats, model calls, resumed, lost, workspace
    assert not figures.dead_letters, report
    assert figures.ok, report
    assert len(figures.to_resumed) >= 19, report


# The checker, on streams written by hand.

CALLS = [
    ("write_file", {"path": "a", "content": "1"}),
    ("run_shell", {"command": "echo x >> j"}),
    ("read_file", {"path": "a"}),
]


def _m(run_id: str, name: str, **body: Any) -> tuple[str, dict[str, Any]]:
    return f"nexus.agent.run.v1.{run_id}.{name}", body


def _turns(run_id: str, first: int, last: int, calls: list[Any]) -> list[Any]:
    """Turns `first..last`, each with its call of `calls` (by turn) and its result."""
    out = []
    for turn in range(first, last + 1):
        out.append(_m(run_id, "turn", turn=turn))
        if turn <= len(calls):
            tool, args = calls[turn - 1]
            call_id = f"{run_id}-{turn}-{first}"
            out.append(_m(run_id, "tool_called", turn=turn, call_id=call_id, tool=tool,
                          arguments=args))  # fmt: skip
            out.append(_m(run_id, "tool_result", turn=turn, call_id=call_id, tool=tool, ok=True))
    return out


def _completed(run_id: str, **details: Any) -> tuple[str, dict[str, Any]]:
    seen = details.pop("seen", {"a": True})
    result = {"details": {"seen": seen, "journal": ["step 2"], **details}}
    return _m(run_id, "completed", reason="succeeded", result=result)


def _resumed_run(run_id: str, killed_after: int, restart_at: int) -> list[Any]:
    """Attempt 1 takes turns 1..killed_after; attempt 2 goes on from `restart_at`."""
    total = len(CALLS) + 1
    return [
        _m(run_id, "requested"),
        _m(run_id, "dispatched", attempt=1, handle="1"),
        *_turns(run_id, 1, killed_after, CALLS),
        _m(run_id, "resuming", attempt=2, reason="runtime_gone"),
        _m(run_id, "dispatched", attempt=2, handle="2"),
        _m(run_id, "resumed", attempt=2, turns=restart_at - 1, messages=3, rerun_calls=["c"]),
        *_turns(run_id, restart_at, total, CALLS),
        _completed(run_id),
    ]


def _checked(
    msgs: list[Any], run_ids: list[str], killed: set[str], script_turns: int = 4
) -> cr.Figures:
    figures = cr.Figures(runs=sum(1 for r in run_ids if "-r" in r), lost_runs=0, seed=0)
    control = next((r for r in run_ids if r.endswith("-c0")), None)
    cr.check(figures, run_ids, msgs, killed=killed, control=control, script_turns=script_turns)
    return figures


def _control(turns: int = 4) -> list[Any]:
    return [
        _m("x-c0", "dispatched", attempt=1, handle="9"),
        *_turns("x-c0", 1, turns, CALLS),
        _completed("x-c0"),
    ]


def test_checker_passes_a_clean_resume() -> None:
    msgs = _control() + _resumed_run("x-r0", killed_after=2, restart_at=3)
    figures = _checked(msgs, ["x-c0", "x-r0"], {"x-r0"})
    assert figures.ok, figures.lines()
    run = figures.checks["x-r0"]
    assert (run.outcome, run.attempts, run.model_calls, run.repeats) == (
        "completed/succeeded",
        2,
        4,
        [],
    )
    assert run.resumed == [2]
    assert (run.rerun, run.interrupted) == (1, 0)
    assert figures.baseline == 4


def test_checker_counts_a_repeated_call_and_allows_one() -> None:
    # Killed after turn 2's call had its result; attempt 2 redid turn 2: one repeat, 5 calls.
    msgs = _control(4) + _resumed_run("x-r0", killed_after=2, restart_at=2)
    figures = _checked(msgs, ["x-c0", "x-r0"], {"x-r0"})
    run = figures.checks["x-r0"]
    assert len(run.repeats) == 1
    assert "run_shell" in run.repeats[0]
    assert run.model_calls == 5
    # 5 model calls against the control's 4 is 125 %: past the limit.
    assert run.problems == ["5 model calls, the control run 4"]
    # With a longer control run (10 calls: 5 is far below 110 %), one repeat is fine.
    figures = cr.Figures(runs=1, lost_runs=0, seed=0, baseline=10)
    cr.check(figures, ["x-r0"], msgs[len(_control(4)) :], killed={"x-r0"})
    assert figures.ok, figures.lines()


def test_checker_finds_two_repeats() -> None:
    msgs = _control() + _resumed_run("x-r0", killed_after=3, restart_at=2)
    figures = _checked(msgs, ["x-c0", "x-r0"], {"x-r0"})
    run = figures.checks["x-r0"]
    assert len(run.repeats) == 2
    assert any("2 repeated tool calls" in p for p in run.problems)
    assert not figures.ok


def test_checker_does_not_count_a_call_that_never_got_its_result() -> None:
    # Attempt 1 called run_shell at turn 2 and died before its result: attempt 2 may call it
    # again (or tell the model it was interrupted); no repeat.
    run = _resumed_run("x-r0", killed_after=2, restart_at=2)
    result = next(i for i, (s, b) in enumerate(run) if s.endswith("tool_result") and
                  b["turn"] == 2)  # fmt: skip
    del run[result]
    figures = _checked(run, ["x-r0"], {"x-r0"})
    assert figures.checks["x-r0"].repeats == []


def test_checker_wants_resumed_a_restored_workspace_and_no_journal_line_twice() -> None:
    run = [m for m in _resumed_run("x-r0", 2, 3) if not m[0].endswith(".resumed")]
    run[-1] = _completed("x-r0", seen={"a": False}, journal=["step 2", "step 2"])
    problems = _checked(run, ["x-r0"], {"x-r0"}).checks["x-r0"].problems
    assert any("without a `resumed` event for attempts [2]" in p for p in problems)
    assert any("without seeing what it wrote: ['a']" in p for p in problems)
    assert any("a journal line twice" in p for p in problems)
    # Attempt 2 asked the model again after attempt 1's finish: not the script's report.
    run = _resumed_run("x-r1", 2, 3)
    run[-1] = _m("x-r1", "completed", reason="succeeded",
                 result={"summary": "Nothing more to do.", "details": {}})  # fmt: skip
    problems = _checked(run, ["x-r1"], {"x-r1"}).checks["x-r1"].problems
    assert problems == ["finished without the script's report: 'Nothing more to do.', details {}"]


def test_checker_wants_one_terminal_event_and_enough_completed() -> None:
    run = [*_resumed_run("x-r0", 2, 3), _m("x-r0", "lost", reason="runtime_gone")]
    figures = _checked(run, ["x-r0"], {"x-r0"})
    assert figures.checks["x-r0"].problems == ["2 terminal events: ['completed', 'lost']"]
    # 1 of 2 resumable runs complete: below 95 %.
    lost = [
        _m("x-r1", "dispatched", attempt=1, handle="1"),
        _m("x-r1", "lost", reason="runtime_gone"),
    ]
    figures = _checked(_resumed_run("x-r0", 2, 3) + lost, ["x-r0", "x-r1"], {"x-r0", "x-r1"})
    assert figures.completed == 1
    assert not figures.ok


def test_checker_wants_a_max_attempts_1_run_lost_never_resumed() -> None:
    lost = [
        _m("x-o0", "dispatched", attempt=1, handle="1"),
        *_turns("x-o0", 1, 2, CALLS),
        _m("x-o0", "lost", reason="runtime_gone"),
    ]
    figures = _checked(lost, ["x-o0"], {"x-o0"})
    assert figures.checks["x-o0"].problems == []
    assert figures.checks["x-o0"].outcome == "lost/runtime_gone"
    resumed = _resumed_run("x-o1", 2, 3)
    problems = _checked(resumed, ["x-o1"], {"x-o1"}).checks["x-o1"].problems
    assert problems[0] == "max_attempts=1 run ended completed/succeeded, not lost"
    assert "was resumed: 2 attempts" in problems[1]
    # A kill that came after the run ended: completing is right then.
    late = [(s.replace("x-c0", "x-o2"), b) for s, b in _control()]
    figures = _checked(late, ["x-o2"], set())
    assert figures.checks["x-o2"].problems == []
    assert figures.checks["x-o2"].outcome == "completed/succeeded"


def test_checker_flags_a_control_run_that_differs_from_the_script() -> None:
    figures = _checked(_control(4), ["x-c0"], set(), script_turns=cr.SCRIPT_TURNS)
    assert figures.problems == [f"control run made 4 model calls, the script has {cr.SCRIPT_TURNS}"]
    assert not figures.ok
    assert cr.SCRIPT_TURNS == 11  # ten tool turns and finish (the offline `resume` script)


def _read_only_run(run_id: str, details: dict[str, Any]) -> list[Any]:
    """Two reads and a finish (the planner script's three model calls), killed after turn 1."""
    reads = [("list_files", {"path": "."}), ("read_file", {"path": "calc.py"})]
    result = {"summary": "done", "details": details}
    return [
        _m(run_id, "dispatched", attempt=1, handle="1"),
        *_turns(run_id, 1, 1, reads),
        _m(run_id, "resuming", attempt=2, reason="runtime_gone"),
        _m(run_id, "dispatched", attempt=2, handle="2"),
        _m(run_id, "resumed", attempt=2, turns=1, messages=3),
        *_turns(run_id, 2, 3, reads),
        _m(run_id, "completed", reason="succeeded", result=result),
    ]


def test_checker_wants_a_read_only_runs_detail_and_no_runner_error() -> None:
    planner = _read_only_run("x-rp0", {"steps": ["a"]})
    reviewer = _read_only_run("x-rv1", {})
    broken = _resumed_run("x-r2", 1, 2)[:-1]
    broken.append(_m("x-r2", "failed", reason="runner_error", message="workspace w is not empty"))
    runs = ["x-rp0", "x-rv1", "x-r2"]
    figures = _checked(planner + reviewer + broken, runs, set(runs))
    assert (cr.run_kind("x-rp0"), cr.run_kind("x-r2"), cr.run_kind("x-o0")) == ("p", None, None)
    assert figures.checks["x-rp0"].problems == []  # 3 model calls: the planner script's
    assert figures.checks["x-rv1"].problems == [
        "finished without the reviewer script's 'verdict': 'done', details {}"
    ]
    assert figures.checks["x-r2"].problems == [
        "ended failed/runner_error: 'workspace w is not empty'"
    ]
    assert not figures.ok
