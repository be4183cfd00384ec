"""Chaos for flows (issue 28): SIGKILL flows, the scheduler and core while N flows run.

    uv run python -m scripts.chaos_flows [--flows N] [--seed S] [--kills K] [--wait SECONDS]

Starts the dev stack (`nexus dev up --offline-model`, real processes: NATS, PostgreSQL, core,
memory, scheduler with the local runtime, flows; its supervisor restarts a child that dies),
applies a fast agent and a three-step flow (`a -> b -> c`, each a run of that agent), requests
N flows at once, and while they run kills (SIGKILL) the flows service, the scheduler and core
K times each at random moments. Then it waits (bounded) until every flow is terminal and
checks from the STREAMS (NEXUS_FLOWS and NEXUS_RUNS, read from their start, not the
projection):

- every flow run has exactly one terminal event (completed, failed, cancelled) with a reason;
- started twice: a step key (flow run, step, round, item) with two different run ids, a run
  id `prepared` by core more than once, a run `dispatched` twice with the same attempt, or more
  `started` events than dispatch attempts;
- requested twice: a run whose `requested` NEXUS_RUNS stored more than once;
- lost: a run step whose run ended (or the flow ended) with no `step_finished` for it, a step
  whose run core never prepared, a flow not terminal by the deadline (stuck).

A run that ends `lost` (its runner died with the scheduler) legitimately fails its flow with a
reason; it is counted, not an error. tests/e2e/test_flows_chaos.py runs the same with N=30.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy
from nexus_events.contract.streams import DLQ, FLOWS, RUNS
from nexus_events.contract.subjects import flow_event, flow_events_filter, run_events_filter
from nexus_events.events.flows import FlowRequested
from nexus_events.events.runs import Origin
from nexus_events.transport.bus import Bus, BusSettings

from tests.support import devstack

KILLED = ("flows", "scheduler", "core")
FLOW_ID = "chaos"
AGENT_ID = "chaos-echo"
# The offline model's `chat` script: one turn, no tools, finish. The runner's own start-up
# is most of a run's time, so a step takes ~1-3 s and kills land before, during and after runs.
AGENT_YAML = f"""\
id: {AGENT_ID}
role: custom
description: Answers at once (the offline model's chat script), for the flows chaos test.
model: {{name: gpt-4o-mini}}
system_prompt: "[offline-model:chat] Say hello and finish."
tools: []
budgets: {{max_turns: 3, max_wall_seconds: 300}}
"""
ORDINALS = ("first", "second", "third", "fourth", "fifth")


def flow_yaml(steps: int = 3, timer: float | None = None) -> str:
    """The chaos flow: `steps` runs of the echo agent in a row (a -> b -> c ...), then, with
    `timer`, a wait of that many seconds (a hand-off that needs no runner)."""
    lines = [f"id: {FLOW_ID}", f"description: {steps} runs in a row, for the flows chaos test.",
             "steps:"]  # fmt: skip
    for n in range(steps):
        lines.append(
            f"  - {{id: {chr(ord('a') + n)}, kind: run, agent: {AGENT_ID},"
            f' input: "{ORDINALS[n]} {{{{ input }}}}"}}'
        )
    if timer is not None:
        lines.append(f"  - {{id: pause, kind: wait, timer: {timer}}}")
    return "\n".join(lines) + "\n"


# Roughly how long the stack takes per three-step flow with the runs of many at once (2 cores:
# each run starts a Python runner, ~2 s of CPU): what the kills spread over.
SECONDS_PER_FLOW = 2.0
FLOW_TERMINAL = ("completed", "failed", "cancelled")
RUN_TERMINAL = ("completed", "failed", "cancelled", "timed_out", "lost")

Nexus = Callable[..., "subprocess.CompletedProcess[str]"]


@dataclass
class Figures:
    flows: int
    seed: int
    outcomes: Counter[str] = field(default_factory=Counter)  # "status/reason"
    step_reasons: Counter[str] = field(default_factory=Counter)  # why failed steps failed
    run_outcomes: Counter[str] = field(default_factory=Counter)
    kills: Counter[str] = field(default_factory=Counter)
    restarts: dict[str, int] = field(default_factory=dict)
    duplicates: list[str] = field(default_factory=list)
    # Runs whose `requested` NEXUS_RUNS stored more than once (a restarted flows service
    # repeating a request after JetStream's duplicate window: issue 36).
    rerequested: list[str] = field(default_factory=list)
    lost: list[str] = field(default_factory=list)
    not_terminal: list[str] = field(default_factory=list)
    bad_terminal: list[str] = field(default_factory=list)
    redispatches: int = 0
    dead_letters: Counter[str] = field(default_factory=Counter)  # "subject kind: reason"
    runs: int = 0
    wall: float = 0.0

    @property
    def ok(self) -> bool:
        return not (
            self.duplicates
            or self.rerequested
            or self.lost
            or self.not_terminal
            or self.bad_terminal
        )

    def lines(self) -> list[str]:
        out = [
            f"flows: {self.flows} (seed {self.seed}), runs: {self.runs}, wall: {self.wall:.1f}s",
            "outcomes: " + ", ".join(f"{k}={v}" for k, v in sorted(self.outcomes.items())),
            "failed steps: "
            + (", ".join(f"{k}={v}" for k, v in sorted(self.step_reasons.items())) or "none"),
            "runs ended: " + ", ".join(f"{k}={v}" for k, v in sorted(self.run_outcomes.items())),
            "kills: " + ", ".join(f"{s}={self.kills[s]}" for s in KILLED),
            "supervisor restarts: " + ", ".join(f"{k}={v}" for k, v in self.restarts.items()),
            f"re-dispatches (attempt > 1): {self.redispatches}",
            f"started twice: {len(self.duplicates)}",
            f"requested twice: {len(self.rerequested)}",
            f"lost: {len(self.lost)}",
            f"not terminal: {len(self.not_terminal)}",
            f"terminal events without one reason: {len(self.bad_terminal)}",
            "dead letters: "
            + (", ".join(f"{k}={v}" for k, v in sorted(self.dead_letters.items())) or "none"),
        ]
        for label, items in (
            ("DUPLICATE", self.duplicates),
            ("REQUESTED TWICE", self.rerequested),
            ("LOST", self.lost),
            ("NOT TERMINAL", self.not_terminal),
            ("BAD TERMINAL", self.bad_terminal),
        ):
            out += [f"  {label}: {x}" for x in items[:20]]
        return out


def stack_state(home: Path) -> dict[str, Any]:
    state: dict[str, Any] = json.loads((home / "state.json").read_text())
    return state


def _live_pid(entry: dict[str, Any]) -> int | None:
    """The service's pid if the supervisor says it runs and that very process is alive."""
    pid = entry.get("pid")
    if entry.get("state") != "running" or not pid:
        return None
    try:
        proc = psutil.Process(pid)
        if abs(proc.create_time() - (entry.get("create_time") or 0)) > 1.0:
            return None
        return None if proc.status() == psutil.STATUS_ZOMBIE else pid
    except psutil.Error:
        return None


async def _kill_loop(
    home: Path, rng: random.Random, kills: int, gap: tuple[float, float], done: asyncio.Event
) -> Counter[str]:
    """Kill each of KILLED `kills` times, one at a time, at random moments `gap` apart."""
    plan = [s for s in KILLED for _ in range(kills)]
    rng.shuffle(plan)
    killed: Counter[str] = Counter()
    for service in plan:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(done.wait(), rng.uniform(*gap))
        if done.is_set():
            break
        # A service still restarting from its last kill: wait (bounded) for the new process.
        for _ in range(100):
            pid = _live_pid(stack_state(home)["services"].get(service, {}))
            if pid is not None:
                break
            await asyncio.sleep(0.1)  # polling the state file the supervisor rewrites
        else:
            continue
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
            killed[service] += 1
    return killed


def _json_object(data: bytes) -> dict[str, Any] | None:
    """A message body as a JSON object, or None: a stack the e2e suite shares also holds the
    poison its tests publish by hand (random bytes, arrays) on the same subjects, which the
    services dead-letter and no check here is about."""
    try:
        body = json.loads(data)
    except ValueError:  # UnicodeDecodeError and JSONDecodeError both are
        return None
    return body if isinstance(body, dict) else None


async def read_messages(js: Any, stream: str, subject: str, after: int = 0) -> list[Any]:
    """`stream`'s messages on `subject` past sequence `after`, to its current end (the chaos
    checkers read the streams, not the projections)."""
    if (await js.stream_info(stream)).state.last_seq <= after:
        return []  # nothing new: no consumer, no fetch that waits its timeout out
    out: list[Any] = []
    sub = await js.pull_subscribe(
        subject,
        stream=stream,
        config=ConsumerConfig(
            deliver_policy=DeliverPolicy.BY_START_SEQUENCE,
            opt_start_seq=after + 1,
            ack_policy=AckPolicy.NONE,
            inactive_threshold=30.0,
        ),
    )
    try:
        while True:
            try:
                msgs = await sub.fetch(500, timeout=2.0)
            except TimeoutError:
                # A slow answer on a busy machine is not the end: the consumer says what is left.
                if (await sub.consumer_info()).num_pending == 0:
                    break
                continue
            out += msgs
            if msgs[-1].metadata.num_pending == 0:
                break
    finally:
        with contextlib.suppress(Exception):
            await sub.unsubscribe()
    return out


async def read_stream(js: Any, stream: str, subject: str) -> list[tuple[str, dict[str, Any]]]:
    """Every message of `stream` on `subject` from the start whose body is a JSON object:
    (subject, body)."""
    out: list[tuple[str, dict[str, Any]]] = []
    for msg in await read_messages(js, stream, subject):
        body = _json_object(msg.data)
        if body is not None:
            out.append((msg.subject, body))
    return out


async def _terminal_count(js: Any, prefix: str) -> int:
    msgs = await read_stream(js, FLOWS, flow_events_filter())
    return len(
        {
            s.split(".")[3]
            for s, _ in msgs
            if s.split(".")[3].startswith(prefix) and s.split(".")[4] in FLOW_TERMINAL
        }
    )


def check(
    figures: Figures,
    flow_ids: list[str],
    flow_msgs: list[tuple[str, dict[str, Any]]],
    run_msgs: list[tuple[str, dict[str, Any]]],
) -> None:
    """Fill `figures` from the streams' messages (see the module docstring)."""
    wanted = set(flow_ids)
    by_flow: dict[str, list[tuple[str, dict[str, Any]]]] = defaultdict(list)
    for subject, body in flow_msgs:
        fid, name = subject.split(".")[3], subject.split(".")[4]
        if fid in wanted:
            by_flow[fid].append((name, body))
    runs: dict[str, list[tuple[str, dict[str, Any]]]] = defaultdict(list)
    for subject, body in run_msgs:
        run_id, name = subject.split(".")[4], subject.split(".")[5]
        runs[run_id].append((name, body))

    for fid in flow_ids:
        _check_flow(figures, fid, by_flow.get(fid, []), runs)


def _check_flow(
    figures: Figures,
    fid: str,
    events: list[tuple[str, dict[str, Any]]],
    runs: dict[str, list[tuple[str, dict[str, Any]]]],
) -> None:
    terminal = [(n, b) for n, b in events if n in FLOW_TERMINAL]
    if not terminal:
        figures.not_terminal.append(f"{fid}: last events {[n for n, _ in events[-4:]]}")
    elif len(terminal) > 1 or not all(b.get("reason") for _, b in terminal):
        figures.bad_terminal.append(f"{fid}: {[(n, b.get('reason')) for n, b in terminal]}")
    if terminal:
        name, body = terminal[0]
        figures.outcomes[f"{name}/{body.get('reason')}"] += 1
    # A cancelled flow may leave a step unfinished on purpose; nothing here cancels one.
    flow_cancelled = bool(terminal) and terminal[0][0] == "cancelled"

    started: dict[tuple[Any, ...], set[str]] = defaultdict(set)
    finished: dict[tuple[Any, ...], list[dict[str, Any]]] = defaultdict(list)
    for name, body in events:
        key = (body.get("step"), body.get("round", 1), body.get("item"))
        if name == "step_started" and body.get("kind") in ("run", None) and body.get("run_id"):
            started[key].add(body["run_id"])
        elif name == "step_finished":
            finished[key].append(body)
            if body.get("status") != "succeeded":
                figures.step_reasons[str(body.get("reason"))] += 1
    for key, run_ids in started.items():
        label = f"{fid} step {key[0]} round {key[1]}" + (
            f" item {key[2]}" if key[2] is not None else ""
        )
        if len(run_ids) > 1:
            figures.duplicates.append(f"{label}: run ids {sorted(run_ids)}")
        for run_id in run_ids:
            figures.runs += 1
            _check_run(figures, label, run_id, runs.get(run_id, []))
            ended = any(n in RUN_TERMINAL for n, _ in runs.get(run_id, []))
            if not finished.get(key) and (ended or terminal) and not flow_cancelled:
                figures.lost.append(f"{label}: run {run_id} ended={ended}, no step_finished")
        if len(finished.get(key, [])) > 1:
            figures.duplicates.append(f"{label}: {len(finished[key])} step_finished events")


def _check_run(
    figures: Figures, label: str, run_id: str, events: list[tuple[str, dict[str, Any]]]
) -> None:
    names = Counter(n for n, _ in events)
    attempts = Counter(b.get("attempt", 1) for n, b in events if n == "dispatched")
    for n, _ in events:
        if n in RUN_TERMINAL:
            figures.run_outcomes[n] += 1
            break
    if names["requested"] > 1:
        figures.rerequested.append(f"{label}: run {run_id} requested {names['requested']} times")
    if names["prepared"] == 0:
        figures.lost.append(f"{label}: run {run_id} never prepared by core")
    if names["prepared"] > 1:
        figures.duplicates.append(f"{label}: run {run_id} prepared {names['prepared']} times")
    if any(c > 1 for c in attempts.values()):
        figures.duplicates.append(f"{label}: run {run_id} dispatched twice: {dict(attempts)}")
    if names["started"] > max(1, len(attempts)):
        figures.duplicates.append(
            f"{label}: run {run_id} started {names['started']} times, {len(attempts)} attempts"
        )
    figures.redispatches += max(0, len(attempts) - 1)


async def run_chaos(
    home: Path,
    nexus: Nexus,
    workdir: Path,
    *,
    flows: int,
    seed: int,
    kills: int,
    steps: int = 3,
    timer: float | None = None,
    gap: tuple[float, float] | None = None,
    wait: float = 300.0,
) -> Figures:
    """The experiment against a running dev stack at `home` (`nexus` runs the CLI).

    `gap`: seconds between two kills (drawn uniformly); by default the kills spread over
    about `SECONDS_PER_FLOW` seconds a flow, the flows' life on 2 cores.
    """
    # Not for secrets: a seeded generator makes a kill schedule repeatable.
    rng = random.Random(seed)  # noqa: S311
    if gap is None:
        per_flow = SECONDS_PER_FLOW * steps / 3
        gap = (0.5, max(1.0, 2 * per_flow * flows / max(1, kills * len(KILLED))))
    figures = Figures(flows=flows, seed=seed)
    (workdir / "agent.yaml").write_text(AGENT_YAML)
    (workdir / "flow.yaml").write_text(flow_yaml(steps, timer))
    for args in (("agents", "apply", "-f"), ("flows", "apply")):
        path = workdir / ("agent.yaml" if args[0] == "agents" else "flow.yaml")
        applied = nexus(*args, str(path))
        if applied.returncode != 0:
            why = applied.stderr or applied.stdout
            raise RuntimeError(f"nexus {' '.join(args)} failed: {why}")
    before = {
        name: entry.get("restarts", 0) for name, entry in stack_state(home)["services"].items()
    }

    prefix = f"chx{seed:x}{rng.randrange(16**4):04x}-"
    flow_ids = [f"{prefix}{i:03d}" for i in range(flows)]
    bus = await Bus.connect(BusSettings(url=stack_state(home)["nats_url"]), source="chaos")
    try:
        start = time.monotonic()
        for fid in flow_ids:
            request = FlowRequested(
                flow=FLOW_ID, input=fid, origin=Origin.CLI, requested_by="chaos", task_id=None
            )
            await bus.publish(
                flow_event(fid, request.event_name), request, msg_id=f"chaos:requested:{fid}"
            )
        done = asyncio.Event()
        killer = asyncio.create_task(_kill_loop(home, rng, kills, gap, done))
        deadline = start + wait
        while time.monotonic() < deadline:
            if await _terminal_count(bus.js, prefix) == flows and killer.done():
                break
            await asyncio.sleep(1.0)  # polling the stream for terminal events
        done.set()
        figures.kills = await killer
        figures.wall = time.monotonic() - start
        flow_msgs = await read_stream(bus.js, FLOWS, flow_events_filter())
        run_msgs = await read_stream(bus.js, RUNS, run_events_filter())
        dead = await read_stream(bus.js, DLQ, "nexus.dlq.v1.>")
    finally:
        await bus.close()
    after = stack_state(home)["services"]
    figures.restarts = {s: after[s].get("restarts", 0) - before.get(s, 0) for s in KILLED}
    check(figures, flow_ids, flow_msgs, [(s, b) for s, b in run_msgs if prefix in s])
    # Whatever a kill made a service dead-letter (a valid event there would be a bug).
    for _, body in dead:
        figures.dead_letters[f"{body.get('service')}: {body.get('reason')}"] += 1
    return figures


def cli(env: dict[str, str], cwd: Path) -> Nexus:
    def nexus(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "nexus_cli", *args],
            env=env,
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    return nexus


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--flows", type=int, default=100)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--kills", type=int, default=5, help="SIGKILLs per service")
    parser.add_argument("--wait", type=float, default=600.0, help="most seconds to wait")
    parser.add_argument("--steps", type=int, default=3, choices=range(1, 6), help="runs a flow")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="nexus-chaos-") as tmp_name:
        tmp = Path(tmp_name)
        # The end-to-end suite's stack environment, with its quick heartbeats.
        env = devstack.stack_env(tmp, {"NEXUS_HEARTBEAT_INTERVAL": "2"}, drop=("NEXUS_", "OPENAI_"))
        nexus = cli(env, tmp)
        home = tmp / ".nexus"
        t0 = time.monotonic()
        up = nexus("dev", "up", "--offline-model", "-o", "json", timeout=180)
        if up.returncode != 0:
            print(f"nexus dev up failed: {up.stderr or up.stdout}", file=sys.stderr)
            return 2
        print(f"dev stack up in {time.monotonic() - t0:.1f}s", flush=True)
        try:
            figures = asyncio.run(
                run_chaos(
                    home,
                    nexus,
                    tmp,
                    flows=args.flows,
                    steps=args.steps,
                    seed=args.seed,
                    kills=args.kills,
                    wait=args.wait,
                )
            )
        finally:
            nexus("dev", "down", timeout=180)
    print("\n".join(figures.lines()))
    print("OK" if figures.ok else "FAILED")
    return 0 if figures.ok else 1


if __name__ == "__main__":
    sys.exit(main())
