"""Chaos for resume (issues 24, 36): SIGKILL each run's runner anywhere in it; the run goes on.

    uv run python -m scripts.chaos_resume [--runs N] [--seed S] [--lost-runs L] [--wait SECONDS]

Starts the dev stack (`nexus dev up --offline-model`: NATS, PostgreSQL, core, the scheduler
with the local runtime, ...), applies agents that run offline model scripts (see
nexus_cli.devstack.offline_model): `chaos-resume` (`resume.max_attempts: 2`, the `resume`
script: ten quick turns of write_file, read_file and run_shell, then finish),
`chaos-resume-once` (the same, `max_attempts: 1`) and three read-only agents, granted only
read tools, that never change a file and so never checkpoint (`chaos-resume-planner`,
`-reviewer`, `-tester`: the `planner`, `reviewer` and `tester` scripts). Every run clones
the same local repository, so a resumed attempt finds the dead attempt's clone at its
workspace path. It requests at once N resumable runs (three in ten read-only), L of the
max_attempts=1 agent and one control run of the first that nobody kills. For each killed
run it draws a turn k (0 to the script's last tool turn by default, --kill-turns; 0 is the
runner's `started` event: the kill lands in its clone or first model call, before any tool
call) and a delay d of up to 0.1 s (--kill-delay), seeded; it follows the run's events live
and, d after the run's `turn` event k (or `started`) arrived, SIGKILLs its runner (the pid
the `dispatched` event names; only if that process is the run's runner): the kill lands in
the clone, a tool call, a model call, a checkpoint, between them. Then it waits (bounded)
until every run is terminal and checks from the STREAM (NEXUS_RUNS read from its start, not
the projection), per run, with attempts told apart by their `dispatched` events:

- one terminal event, with a reason; a resumable run ends `completed`, a run of the
  max_attempts=1 agent ends `lost` after its one attempt (never resumed);
- repeated tool calls: a `tool_called` of attempt n >= 2 with the tool and arguments of a call
  of an earlier attempt that had its `tool_result` (the script never makes one call twice);
  at most 1 a run;
- model calls (`turn` events of all attempts) at most 110 % of the control run's (of its own
  script's, for a read-only run);
- a resumed run has a `resumed` event for each attempt past the first, and the `resume`
  script's finish saw every file it wrote (the workspace was restored) and no journal line
  twice (a side effect was not run again); a read-only run's finish carries its script's
  detail (`steps`, `verdict`, `passed`);
- nothing new in the DLQ.

It prints those figures and the resume latency (p50/p99) from the SIGKILL to the scheduler's
`resuming`, to the new attempt's `resumed`, and to its first `turn` (its first model call
answered). tests/e2e/test_resume_chaos.py runs the same with N=20.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
from nats.aio.msg import Msg
from nexus_cli.devstack import offline_model
from nexus_events.contract.streams import DLQ, RUNS
from nexus_events.contract.subjects import run_event, run_events_filter
from nexus_events.events.runs import Origin, RunRequested
from nexus_events.events.specs import RepoSpec
from nexus_events.transport.bus import Bus, BusSettings

from scripts.chaos_flows import cli, read_messages, read_stream, stack_state
from tests.support import devstack

AGENT_ID = "chaos-resume"
ONCE_AGENT_ID = "chaos-resume-once"
# Read-only agents (issue 36): they never change a file, so they never checkpoint; a resumed
# attempt must start from a clean clone. Run id tag -> (agent id, offline script, tools, the
# detail its finish must carry).
READ_ONLY: dict[str, tuple[str, str, str, str]] = {
    "p": ("chaos-resume-planner", "planner", "[list_files, read_file, finish]", "steps"),
    "v": ("chaos-resume-reviewer", "reviewer", "[list_files, read_file, finish]", "verdict"),
    "t": (
        "chaos-resume-tester",
        "tester",
        "[{name: run_tests, options: {command: 'test -f calc.py'}}, finish]",
        "passed",
    ),
}
# Of every 10 resumable runs, these are read-only (the others run the `resume` script).
READ_ONLY_SLOTS = {3: "p", 6: "v", 9: "t"}
RUN_TERMINAL = ("completed", "failed", "cancelled", "timed_out", "lost")
# Model calls of the uninterrupted script (ten tool turns, then finish); the control run
# measures it on the stack, this is what it must measure.
SCRIPT_TURNS = len(offline_model.SCRIPTS["resume"](offline_model.Turn(0, "", frozenset())))


def turns_of(script: str) -> int:
    """Model calls of an offline script run uninterrupted."""
    return len(offline_model.SCRIPTS[script](offline_model.Turn(0, "", frozenset())))


# The turns a kill is drawn from, and its delay after that turn's event (a turn of the script
# takes ~0.1 s on an idle machine); turn 0 is the runner's `started` event (the kill lands in
# its clone or its first model call, before any tool call). By default a kill lands anywhere
# from the runner's start to the last tool call (issue 36: kills before the first checkpoint
# left a workspace the next attempt could not clone into). `--kill-turns 1-11` also kills
# runs that already called `finish` (in their finishing), or kills none when too late.
# Read-only runs draw from 0 to their last tool turn.
KILL_TURNS = (0, SCRIPT_TURNS - 2)
KILL_DELAY = (0.0, 0.1)
MODEL_CALL_LIMIT = 1.10  # of the control run's model calls
REPEAT_LIMIT = 1  # repeated tool calls a run may make
COMPLETE_SHARE = 0.95  # of the resumable runs (19 of 20)

Nexus = Callable[..., "subprocess.CompletedProcess[str]"]


def agent_yaml(agent_id: str, max_attempts: int) -> str:
    return f"""\
id: {agent_id}
role: custom
description: The offline model's resume script (ten quick turns), for the resume chaos test.
model: {{name: gpt-4o-mini}}
system_prompt: "[offline-model:resume] Write, read back and journal, then finish."
tools: [write_file, read_file, run_shell, finish]
budgets: {{max_turns: 40, max_wall_seconds: 600}}
resume: {{max_attempts: {max_attempts}}}
"""


def read_only_yaml(tag: str) -> str:
    agent_id, script, tools, _ = READ_ONLY[tag]
    return f"""\
id: {agent_id}
role: custom
description: The offline model's {script} script (read-only), for the resume chaos test.
model: {{name: gpt-4o-mini}}
system_prompt: "[offline-model:{script}] Read the project, then finish."
tools: {tools}
budgets: {{max_turns: 20, max_wall_seconds: 600}}
resume: {{max_attempts: 2}}
"""


def run_kind(run_id: str) -> str | None:
    """The read-only tag of a resumable run id (``-rp003``: planner), None for the `resume`
    script's runs (``-r003``) and the others."""
    tail = run_id.rsplit("-", 1)[-1]
    tag = tail[1:2]
    return tag if tail.startswith("r") and tag in READ_ONLY else None


@dataclass
class Kill:
    """One planned SIGKILL: `delay` seconds after the run's `turn` event `turn` (so it lands
    in a tool, a model call, a checkpoint ...); what happened to it."""

    turn: int
    delay: float = 0.0
    armed: bool = False
    pid: int | None = None
    at: float | None = None  # monotonic time of the SIGKILL
    missed: str | None = None  # why no runner was killed


@dataclass
class Live:
    """A run's events as they arrived (monotonic time, name, body), and its kill."""

    kill: Kill | None
    events: list[tuple[float, str, dict[str, Any]]] = field(default_factory=list)
    pids: dict[int, int] = field(default_factory=dict)  # attempt -> runner pid
    pending: bool = False  # turn k came before the pid was known

    @property
    def terminal(self) -> bool:
        return any(name in RUN_TERMINAL for _, name, _ in self.events)


@dataclass
class RunCheck:
    """What the stream says of one run."""

    run_id: str
    outcome: str = "none"  # "status/reason" of its terminal event
    attempts: int = 0
    model_calls: int = 0
    repeats: list[str] = field(default_factory=list)
    resumed: list[int] = field(default_factory=list)  # attempts with a `resumed` event
    resuming: list[str] = field(default_factory=list)  # reasons the scheduler gave
    rerun: int = 0  # interrupted calls the resumed attempts ran again (idempotent ones)
    interrupted: int = 0  # interrupted calls reported to the model as such
    problems: list[str] = field(default_factory=list)


@dataclass
class Figures:
    runs: int
    lost_runs: int
    seed: int
    checks: dict[str, RunCheck] = field(default_factory=dict)
    baseline: int = SCRIPT_TURNS  # the control run's model calls
    killed: int = 0
    kill_turns: Counter[int] = field(default_factory=Counter)  # of the kills that landed
    missed: list[str] = field(default_factory=list)
    dead_letters: Counter[str] = field(default_factory=Counter)
    not_terminal: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)  # not of one run
    to_resuming: list[float] = field(default_factory=list)  # seconds after the SIGKILL
    to_resumed: list[float] = field(default_factory=list)
    to_turn: list[float] = field(default_factory=list)
    reported_ms: list[int] = field(default_factory=list)  # resumed.latency_ms
    # From an attempt's `dispatched` to its first `turn`: a runner's start to its first model
    # call answered, for first attempts (a cold start) and resumed ones (start and restore).
    fresh_start: list[float] = field(default_factory=list)
    resumed_start: list[float] = field(default_factory=list)
    wall: float = 0.0

    def resumable(self) -> list[RunCheck]:
        return [c for r, c in self.checks.items() if r.rsplit("-", 1)[-1].startswith("r")]

    def once(self) -> list[RunCheck]:
        return [c for r, c in self.checks.items() if r.rsplit("-", 1)[-1].startswith("o")]

    @property
    def completed(self) -> int:
        return sum(1 for c in self.resumable() if c.outcome.startswith("completed/"))

    @property
    def ok(self) -> bool:
        return (
            self.completed >= math.ceil(COMPLETE_SHARE * self.runs)
            and not self.failures()
            and not self.dead_letters
            and not self.problems
        )

    def failures(self) -> list[str]:
        """Every run's problems; one run of the resumable ones may fail to complete."""
        out = []
        for check in self.checks.values():
            out += [f"{check.run_id}: {p}" for p in check.problems]
        return out

    def lines(self) -> list[str]:
        calls = [c.model_calls / self.baseline for c in self.resumable() if c.attempts > 1]
        repeats = Counter(len(c.repeats) for c in self.resumable())
        out = [
            f"runs: {self.runs} resumable + {self.lost_runs} max_attempts=1 + 1 control"
            f" (seed {self.seed}), wall: {self.wall:.1f}s",
            f"killed: {self.killed}, kills that missed (run already ended): {len(self.missed)}",
            "kills after turn (0: the runner's start): "
            + _counts(Counter({str(k): v for k, v in self.kill_turns.items()})),
            f"completed: {self.completed}/{self.runs}",
            "outcomes: " + _counts(Counter(c.outcome for c in self.resumable())),
            "attempts: " + _counts(Counter(str(c.attempts) for c in self.resumable())),
            "repeated tool calls per run: " + _counts(Counter(str(k) for k in repeats.elements())),
            f"model calls: control {self.baseline}; resumed runs max "
            + (f"{max(calls):.0%}, mean {statistics.fmean(calls):.0%}" if calls else "-")
            + " of it",
            "interrupted calls on resume: "
            f"{sum(c.rerun for c in self.resumable())} run again (idempotent),"
            f" {sum(c.interrupted for c in self.resumable())} reported to the model",
            "max_attempts=1 runs: " + _counts(Counter(c.outcome for c in self.once())),
            "resume latency after SIGKILL, p50/p99 s: "
            f"resuming {_pcts(self.to_resuming)}, resumed {_pcts(self.to_resumed)},"
            f" first model call {_pcts(self.to_turn)}",
            f"resumed.latency_ms p50/p99: {_pcts([x / 1000 for x in self.reported_ms])} s",
            f"dispatched -> first model call p50/p99 s: first attempts {_pcts(self.fresh_start)},"
            f" resumed attempts {_pcts(self.resumed_start)}",
            f"not terminal: {len(self.not_terminal)}",
            "dead letters: " + (_counts(self.dead_letters) or "none"),
        ]
        out += [f"  PROBLEM: {p}" for p in (self.problems + self.failures())[:30]]
        out += [f"  NOT TERMINAL: {x}" for x in self.not_terminal[:10]]
        out += [f"  MISSED: {x}" for x in self.missed[:10]]
        return out


def _counts(counter: Counter[str]) -> str:
    return ", ".join(f"{k}={v}" for k, v in sorted(counter.items()))


def percentiles(samples: list[float]) -> tuple[float, float]:
    """p50 and p99 (inclusive method: with few samples p99 is about the largest)."""
    if len(samples) == 1:
        return samples[0], samples[0]
    q = statistics.quantiles(samples, n=100, method="inclusive")
    return q[49], q[98]


def _pcts(samples: list[float]) -> str:
    if not samples:
        return "-"
    p50, p99 = percentiles(samples)
    return f"{p50:.2f}/{p99:.2f}"


def _call_key(body: dict[str, Any]) -> str:
    return json.dumps([body.get("tool"), body.get("arguments") or {}], sort_keys=True)


def check_run(
    run_id: str,
    events: list[tuple[str, dict[str, Any]]],
    *,
    once: bool,
    baseline: int,
    read_only: str | None = None,
) -> RunCheck:
    """One run's events, in stream order, against the rules of the module docstring.

    `once`: a run of the max_attempts=1 agent (it must end lost, never resumed);
    `read_only`: the tag of a read-only agent's run (READ_ONLY), whose finish carries its
    script's detail instead of the `resume` script's report."""
    check = RunCheck(run_id)
    terminal = [(n, b) for n, b in events if n in RUN_TERMINAL]
    if len(terminal) != 1:
        check.problems.append(f"{len(terminal)} terminal events: {[n for n, _ in terminal]}")
    if terminal:
        name, body = terminal[0]
        check.outcome = f"{name}/{body.get('reason')}"
        if not body.get("reason"):
            check.problems.append(f"terminal event {name} without a reason")
    if check.outcome.endswith("/runner_error"):  # what a dead attempt left made it fail
        check.problems.append(f"ended {check.outcome}: {terminal[0][1].get('message')!r}")
    dispatched = _walk(check, events)
    check.attempts = len(dispatched)
    if any(n > 1 for n in dispatched.values()):
        check.problems.append(f"an attempt dispatched twice: {dict(dispatched)}")
    if len(check.repeats) > REPEAT_LIMIT:
        check.problems.append(f"{len(check.repeats)} repeated tool calls: {check.repeats}")
    if check.model_calls > MODEL_CALL_LIMIT * baseline:
        check.problems.append(f"{check.model_calls} model calls, the control run {baseline}")
    if once:
        _check_once(check)
    else:
        _check_resumed(check, dict(terminal[:1]), read_only)
    return check


def _walk(check: RunCheck, events: list[tuple[str, dict[str, Any]]]) -> Counter[int]:
    """Count model calls, repeated tool calls, resumes; return dispatches per attempt."""
    attempt = 1
    dispatched: Counter[int] = Counter()
    # Calls of earlier attempts that got their result: (tool, arguments) -> call ids.
    done: dict[str, str] = {}
    called: dict[str, str] = {}  # this attempt's call ids -> key
    answered: set[str] = set()
    for name, body in events:
        if name == "dispatched":
            for call_id, key in called.items():
                if call_id in answered:
                    done.setdefault(key, call_id)
            called, answered = {}, set()
            attempt = int(body.get("attempt", 1))
            dispatched[attempt] += 1
        elif name == "turn":
            check.model_calls += 1
        elif name == "tool_called":
            key = _call_key(body)
            if attempt > 1 and key in done:
                check.repeats.append(f"attempt {attempt}: {body.get('tool')} {key}")
            called[str(body.get("call_id"))] = key
        elif name == "tool_result":
            answered.add(str(body.get("call_id")))
        elif name == "resumed":
            check.resumed.append(int(body.get("attempt", 0)))
            check.rerun += len(body.get("rerun_calls") or [])
            check.interrupted += len(body.get("interrupted_calls") or [])
        elif name == "resuming":
            check.resuming.append(str(body.get("reason")))
    return dispatched


def _check_once(check: RunCheck) -> None:
    if not check.outcome.startswith("lost/"):
        check.problems.append(f"max_attempts=1 run ended {check.outcome}, not lost")
    if check.attempts > 1 or check.resuming or check.resumed:
        check.problems.append(
            f"max_attempts=1 run was resumed: {check.attempts} attempts, resuming"
            f" {check.resuming}, resumed {check.resumed}"
        )


def _check_resumed(
    check: RunCheck, terminal: dict[str, dict[str, Any]], read_only: str | None = None
) -> None:
    missing = [a for a in range(2, check.attempts + 1) if a not in check.resumed]
    if missing and "completed" in terminal:
        check.problems.append(f"completed without a `resumed` event for attempts {missing}")
    if len(check.resuming) != max(0, check.attempts - 1):
        check.problems.append(
            f"{len(check.resuming)} `resuming` events for {check.attempts} attempts"
        )
    result = (terminal.get("completed") or {}).get("result") or {}
    details = result.get("details") or {}
    if "completed" in terminal and read_only is not None:
        detail = READ_ONLY[read_only][3]
        if detail not in details:
            check.problems.append(
                f"finished without the {READ_ONLY[read_only][1]} script's {detail!r}:"
                f" {result.get('summary')!r}, details {details}"
            )
    elif "completed" in terminal:
        unseen = [p for p, ok in (details.get("seen") or {}).items() if not ok]
        if not details.get("seen"):
            check.problems.append(
                f"finished without the script's report: {result.get('summary')!r}, details"
                f" {details}"
            )
        elif unseen:
            check.problems.append(f"finished without seeing what it wrote: {unseen}")
        journal = details.get("journal") or []
        if len(set(journal)) != len(journal):
            check.problems.append(f"a journal line twice (a side effect repeated): {journal}")


def check(
    figures: Figures,
    run_ids: list[str],
    msgs: list[tuple[str, dict[str, Any]]],
    *,
    killed: set[str],
    control: str | None = None,
    script_turns: int = SCRIPT_TURNS,
) -> None:
    """Fill `figures` from the run stream's messages (subject, body). Run ids end in `-r<n>`
    (resumable), `-o<n>` (max_attempts=1) or are `control`; `killed`: the runs whose runner
    was SIGKILLed (a kill that came after the run ended changes nothing); `script_turns`: the
    model calls the control run must make."""
    by_run: dict[str, list[tuple[str, dict[str, Any]]]] = {r: [] for r in run_ids}
    for subject, body in msgs:
        parts = subject.split(".")
        if len(parts) == 6 and parts[4] in by_run:
            by_run[parts[4]].append((parts[5], body))
    if control is not None:
        ctl = check_run(control, by_run.pop(control, []), once=False, baseline=script_turns)
        if not ctl.outcome.startswith("completed/") or ctl.attempts != 1 or ctl.problems:
            figures.problems.append(
                f"control run {control}: {ctl.outcome}, {ctl.attempts} attempts, {ctl.problems}"
            )
        elif ctl.model_calls != script_turns:
            figures.problems.append(
                f"control run made {ctl.model_calls} model calls, the script has {script_turns}"
            )
        figures.baseline = ctl.model_calls or script_turns
    for run_id, events in by_run.items():
        once = run_id.rsplit("-", 1)[-1].startswith("o")
        tag = run_kind(run_id)
        # A read-only run is measured against its own script's model calls.
        baseline = figures.baseline if tag is None else turns_of(READ_ONLY[tag][1])
        run = check_run(
            run_id, events, once=once and run_id in killed, baseline=baseline, read_only=tag
        )
        if run_id not in killed and run.attempts > 1:
            run.problems.append(f"not killed, yet {run.attempts} attempts")
        figures.checks[run_id] = run


def _starts(figures: Figures, events: list[tuple[float, str, dict[str, Any]]]) -> None:
    for i, (t, name, body) in enumerate(events):
        if name != "dispatched":
            continue
        for u, n, _ in events[i + 1 :]:
            if n == "dispatched":
                break  # this attempt never answered a model call
            if n == "turn":
                fresh = int(body.get("attempt", 1)) == 1
                (figures.fresh_start if fresh else figures.resumed_start).append(u - t)
                break


def _latencies(figures: Figures, live: dict[str, Live]) -> None:
    """Seconds from each SIGKILL to the next attempt's `resuming`, `resumed`, first `turn`;
    and from each attempt's `dispatched` to its first `turn`."""
    for run in live.values():
        _starts(figures, run.events)
        kill = run.kill
        if kill is None or kill.at is None:
            continue
        after = [(t, n, b) for t, n, b in run.events if t >= kill.at]
        starts = [i for i, (_, n, b) in enumerate(after) if n == "dispatched"]
        for name, out in (("resuming", figures.to_resuming), ("resumed", figures.to_resumed)):
            seen = next((t for t, n, _ in after if n == name), None)
            if seen is not None:
                out.append(seen - kill.at)
        if starts:
            turn = next((t for t, n, _ in after[starts[0] :] if n == "turn"), None)
            if turn is not None:
                figures.to_turn.append(turn - kill.at)
        for _, n, b in after:
            if n == "resumed" and b.get("latency_ms") is not None:
                figures.reported_ms.append(int(b["latency_ms"]))


def _is_runner(pid: int, run_id: str) -> bool:
    """Whether `pid` is the live runner of `run_id` (started with the config in its run dir,
    or a warm runner handed the run, whose slot became the run dir: its working directory is
    in it, the relay's being the run dir's `net`):
    never SIGKILL anything else, not even another run's runner that got a reused pid."""
    try:
        proc = psutil.Process(pid)
        command = " ".join(proc.cmdline())
        mine = run_id in command or run_id in Path(proc.cwd()).parts
        return proc.status() != psutil.STATUS_ZOMBIE and "nexus_runner" in command and mine
    except psutil.Error:
        return False


def _kill(run_id: str, run: Live) -> None:
    kill = run.kill
    assert kill is not None
    pid = run.pids.get(1)
    if pid is None:
        run.pending = True
        return
    run.pending = False
    kill.pid = pid
    if run.terminal or not _is_runner(pid, run_id):
        kill.missed = "the runner had already ended"
        return
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
        kill.at = time.monotonic()
        return
    kill.missed = "no such process"


def _on_event(live: dict[str, Live], subject: str, body: dict[str, Any]) -> None:
    parts = subject.split(".")
    if len(parts) != 6 or parts[4] not in live:
        return
    run_id, name = parts[4], parts[5]
    run = live[run_id]
    run.events.append((time.monotonic(), name, body))
    if name == "dispatched":
        with contextlib.suppress(ValueError):
            run.pids[int(body.get("attempt", 1))] = int(body.get("handle", ""))
        if run.pending:
            _kill(run_id, run)
    kill = run.kill
    if kill is None or kill.armed or len(run.pids) > 1:
        return
    at_start = name == "started" and kill.turn == 0  # before its clone, any model call
    if at_start or (name == "turn" and int(body.get("turn", 0)) >= kill.turn):
        kill.armed = True
        asyncio.get_running_loop().call_later(kill.delay, _kill, run_id, run)


def _planned(rng: random.Random, turns: tuple[int, int], delay: tuple[float, float]) -> Kill:
    return Kill(rng.randint(*turns), round(rng.uniform(*delay), 3))


async def read_since(js: Any, stream: str, subject: str, seq: int) -> list[dict[str, Any]]:
    """Bodies of `stream`'s messages on `subject` past sequence `seq`."""
    return [json.loads(m.data) for m in await read_messages(js, stream, subject, seq)]


def chaos_repo(workdir: Path) -> Path:
    """A bare repository every run clones (a file to read, no test command to detect), so
    a resumed attempt meets the dead attempt's clone at its workspace path."""
    src, bare = workdir / "chaos-src", workdir / "chaos-repo.git"
    if bare.exists():
        return bare
    src.mkdir(parents=True, exist_ok=True)
    (src / "calc.py").write_text("def add(a, b):\n    return a + b\n")
    (src / "README.md").write_text("A repository for the resume chaos test.\n")
    ident = ["-c", "user.name=chaos", "-c", "user.email=chaos@nexus.local"]
    for args in (["init", "-q", "-b", "main"], ["add", "-A"], ["commit", "-q", "-m", "base"]):
        subprocess.run(["git", *ident, "-C", str(src), *args], check=True, capture_output=True)
    subprocess.run(
        ["git", "clone", "-q", "--bare", str(src), str(bare)], check=True, capture_output=True
    )
    return bare


def apply_agents(nexus: Nexus, workdir: Path) -> None:
    """All the agents, in one CLI call (each call is a Python start)."""
    args: list[str] = []
    for agent_id, attempts in ((AGENT_ID, 2), (ONCE_AGENT_ID, 1)):
        path = workdir / f"{agent_id}.yaml"
        path.write_text(agent_yaml(agent_id, attempts))
        args += ["-f", str(path)]
    for tag, (agent_id, *_) in READ_ONLY.items():
        path = workdir / f"{agent_id}.yaml"
        path.write_text(read_only_yaml(tag))
        args += ["-f", str(path)]
    applied = nexus("agents", "apply", *args)
    if applied.returncode != 0:
        raise RuntimeError(f"nexus agents apply failed: {applied.stderr or applied.stdout}")


def _plan(
    rng: random.Random,
    prefix: str,
    runs: int,
    lost_runs: int,
    *,
    kill_turns: tuple[int, int],
    kill_delay: tuple[float, float],
) -> dict[str, tuple[str, Kill | None]]:
    """Run id -> (agent, its kill): the control run first, then the resumable runs (three in
    ten read-only), then the max_attempts=1 runs."""
    control = f"{prefix}-c0"
    plan: dict[str, tuple[str, Kill | None]] = {control: (AGENT_ID, None)}
    for i in range(runs):
        tag = READ_ONLY_SLOTS.get(i % 10)
        if tag is None:
            plan[f"{prefix}-r{i:03d}"] = (AGENT_ID, _planned(rng, kill_turns, kill_delay))
        else:  # from the runner's start to its last tool call
            last = min(kill_turns[1], turns_of(READ_ONLY[tag][1]) - 1)
            kill = _planned(rng, (min(kill_turns[0], last), last), kill_delay)
            plan[f"{prefix}-r{tag}{i:03d}"] = (READ_ONLY[tag][0], kill)
    for i in range(lost_runs):
        plan[f"{prefix}-o{i:03d}"] = (ONCE_AGENT_ID, _planned(rng, kill_turns, kill_delay))
    return plan


async def run_chaos(
    home: Path,
    nexus: Nexus,
    workdir: Path,
    *,
    runs: int,
    seed: int,
    lost_runs: int = 2,
    wait: float = 300.0,
    apply: bool = True,
    kill_turns: tuple[int, int] = KILL_TURNS,
    kill_delay: tuple[float, float] = KILL_DELAY,
) -> Figures:
    """The experiment against a running dev stack at `home` (`nexus` runs the CLI; `apply`:
    apply the two agents first, else they are there; `kill_turns`, `kill_delay`: the ranges
    a kill's turn and delay are drawn from)."""
    # Not for secrets: a seeded generator makes the kill turns repeatable.
    rng = random.Random(seed)  # noqa: S311
    figures = Figures(runs=runs, lost_runs=lost_runs, seed=seed)
    if apply:
        apply_agents(nexus, workdir)
    prefix = f"rsm{seed:x}{rng.randrange(16**4):04x}"
    control = f"{prefix}-c0"
    plan = _plan(rng, prefix, runs, lost_runs, kill_turns=kill_turns, kill_delay=kill_delay)
    live = {run_id: Live(kill) for run_id, (_, kill) in plan.items()}
    repo = RepoSpec(url=str(chaos_repo(workdir)))

    bus = await Bus.connect(BusSettings(url=stack_state(home)["nats_url"]), source="chaos")
    try:
        dlq_seq = (await bus.js.stream_info(DLQ)).state.last_seq

        ended = asyncio.Event()

        async def on_msg(msg: Msg) -> None:
            with contextlib.suppress(ValueError):
                _on_event(live, msg.subject, json.loads(msg.data))
            if msg.subject.rsplit(".", 1)[-1] in RUN_TERMINAL and all(
                r.terminal for r in live.values()
            ):
                ended.set()

        # Core NATS sees every event as it is published: a kill lands right after turn k.
        sub = await bus.nc.subscribe(run_events_filter(), cb=on_msg)
        start = time.monotonic()
        for run_id, (agent, _) in plan.items():
            request = RunRequested(
                agent_id=agent, input="Go.", repo=repo, origin=Origin.CLI, requested_by="chaos"
            )
            await bus.publish(
                run_event(run_id, request.event_name), request, msg_id=f"chaos:requested:{run_id}"
            )
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(ended.wait(), wait)
        figures.wall = time.monotonic() - start
        await sub.unsubscribe()
        msgs = await read_stream(bus.js, RUNS, run_events_filter())
        dead = await read_since(bus.js, DLQ, "nexus.dlq.v1.>", dlq_seq)
    finally:
        await bus.close()
    killed = {r for r, run in live.items() if run.kill is not None and run.kill.at is not None}
    check(figures, list(plan), msgs, killed=killed, control=control)
    for run_id, run in live.items():
        if not run.terminal:
            last = [n for _, n, _ in run.events[-4:]]
            figures.not_terminal.append(f"{run_id}: last events {last}")
        if run.kill is not None:
            if run.kill.at is not None:
                figures.killed += 1
                figures.kill_turns[run.kill.turn] += 1
            else:
                figures.missed.append(f"{run_id} at turn {run.kill.turn}: {run.kill.missed}")
    _latencies(figures, live)
    for body in dead:
        figures.dead_letters[f"{body.get('service')}: {body.get('reason')}"] += 1
    return figures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=100, help="resumable runs, each killed once")
    parser.add_argument("--lost-runs", type=int, default=5, help="killed max_attempts=1 runs")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--wait", type=float, default=900.0, help="most seconds to wait")
    parser.add_argument(
        "--kill-turns",
        default=f"{KILL_TURNS[0]}-{KILL_TURNS[1]}",
        help=f"turns a kill follows, FIRST-LAST of 0-{SCRIPT_TURNS} (0: the runner's start)",
    )
    parser.add_argument("--kill-delay", type=float, default=KILL_DELAY[1], help="most seconds")
    args = parser.parse_args()
    if args.runs < 1 or args.lost_runs < 0:
        parser.error("--runs must be at least 1 and --lost-runs at least 0")
    first, _, last = args.kill_turns.partition("-")
    if not (first.isdigit() and last.isdigit() and 0 <= int(first) <= int(last) <= SCRIPT_TURNS):
        parser.error(f"--kill-turns must be FIRST-LAST within 0-{SCRIPT_TURNS}")
    if not 0 <= args.kill_delay <= 10:
        parser.error("--kill-delay must be within 0-10 seconds")
    with tempfile.TemporaryDirectory(prefix="nexus-chaos-resume-") as tmp_name:
        tmp = Path(tmp_name)
        env = devstack.stack_env(tmp, {"NEXUS_HEARTBEAT_INTERVAL": "2"}, drop=("NEXUS_", "OPENAI_"))
        nexus = cli(env, tmp)
        t0 = time.monotonic()
        up = nexus("dev", "up", "--offline-model", "-o", "json", timeout=180)
        if up.returncode != 0:
            print(f"nexus dev up failed: {up.stderr or up.stdout}", file=sys.stderr)
            return 2
        print(f"dev stack up in {time.monotonic() - t0:.1f}s", flush=True)
        try:
            figures = asyncio.run(
                run_chaos(
                    tmp / ".nexus",
                    nexus,
                    tmp,
                    runs=args.runs,
                    seed=args.seed,
                    lost_runs=args.lost_runs,
                    wait=args.wait,
                    kill_turns=(int(first), int(last)),
                    kill_delay=(0.0, args.kill_delay),
                )
            )
        finally:
            nexus("dev", "down", timeout=180)
    print("\n".join(figures.lines()))
    print("OK" if figures.ok else "FAILED")
    return 0 if figures.ok else 1


if __name__ == "__main__":
    sys.exit(main())
