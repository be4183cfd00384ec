"""Chaos for the JetStream cluster (issue 27): kill -9 a NATS node while runs are live.

    uv run python -m scripts.chaos_cluster [--rounds R] [--runs N] [--seed S] [--wait SECONDS]

Starts the dev stack on a three-node cluster (`nexus dev up --cluster 3 --offline-model`:
streams with three replicas, every service given the three URLs) and applies an agent that
runs the offline model's `paced` script (the `resume` script's eleven turns, with two seconds'
sleep in each of its three journal appends). Each round requests N runs at once, waits until
every one is live (it had a model turn and has not ended), then SIGKILLs one nats-server:
the node leading NEXUS_RUNS (its stream info's `cluster.leader`) in odd rounds, the JetStream
meta leader (a node's /jsz `meta_cluster.leader`) in even ones, by the pid the state file
records for that node (checked to be that very nats-server). It then waits (bounded) until
a new leader is elected, every run of the round is terminal, the supervisor has restarted the
node (same ports, same store) and every replicated stream reports the node's replica current
again. At the end it checks from the STREAMS (NEXUS_RUNS read from its start):

- each run has exactly one terminal event, `completed` with a reason, after one attempt,
  with the script's model calls and report (`scripts.chaos_resume.check_run`: every file read
  back, no journal line twice);
- no gap and no repeat in the runner's event ids: the runner numbers each attempt's events
  (``Nats-Msg-Id`` ``<run>:<attempt>:<event>:<n>``, nexus_runner.publisher) and retries a
  publish with the same id, so the stored n are exactly 1..last; no message id stored twice;
- core's projections (agent_runs, board) equal a rebuild from the stream (rows compared
  before and after `nexus projections rebuild`);
- nothing new in the DLQ.

It prints those figures and, per kill, how long until a new leader answered, the node was
restarted and it had rejoined. tests/e2e/test_cluster_chaos.py runs two rounds of five runs.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import re
import signal
import statistics
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

import asyncpg
import nats.errors
import nats.js.errors
import psutil
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nexus_cli.devstack import nats_cluster
from nexus_cli.devstack.state import NatsNode, StackState, read_state
from nexus_events.contract.streams import DLQ, RUNS
from nexus_events.contract.subjects import run_event, run_events_filter
from nexus_events.events.runs import Origin, RunRequested
from nexus_events.transport.bus import Bus, BusSettings

from scripts import chaos_resume as cr
from scripts.chaos_flows import cli, read_messages
from tests.support import devstack

AGENT_ID = "chaos-cluster"
TARGETS = ("runs-leader", "meta-leader")  # what round 1, 2, 3 ... kills, in turn
# Core's read models and the schemas they live in (nexus_core runs_projection, board_projection);
# left out: the checkpoint (a rebuild's stops where the stream ended then) and the migrations
# (applied again, at another time, to the fresh schema).
PROJECTION_SCHEMAS = {"agent_runs": "core_agent_runs", "board": "core_board"}
NOT_COMPARED = ["projection_checkpoint", "schema_migrations"]
POLL = 0.1  # seconds between looks at the cluster, the state file, the stream
PROBE_TIMEOUT = 1.0  # seconds a look at the cluster may take
MAX_SHOWN = 20  # problems listed in the report

Nexus = cr.Nexus
T = TypeVar("T")


def agent_yaml() -> str:
    return f"""\
id: {AGENT_ID}
role: custom
description: The offline model's paced script, for the cluster chaos test.
model: {{name: gpt-4o-mini}}
system_prompt: "[offline-model:paced] Write, read back and journal, then finish."
tools: [write_file, read_file, run_shell, finish]
budgets: {{max_turns: 40, max_wall_seconds: 600}}
resume: {{max_attempts: 2}}
"""


@dataclass
class Kill:
    """One SIGKILLed nats-server and how the cluster came back (seconds after the kill)."""

    round: int
    target: str  # TARGETS
    node: str
    pid: int
    live: int  # runs of the round live at the kill
    new_leader: str | None = None
    elected: float | None = None  # a new leader of the target answered
    restarted: float | None = None  # the supervisor's new process for the node runs
    rejoined: float | None = None  # every replicated stream has the node's replica current
    ended: float | None = None  # every run of the round is terminal

    def line(self) -> str:
        return (
            f"round {self.round}: killed {self.node} (pid {self.pid}, the {self.target}) with"
            f" {self.live} runs live; new leader {self.new_leader} after {_s(self.elected)},"
            f" restarted after {_s(self.restarted)}, rejoined after {_s(self.rejoined)},"
            f" runs ended after {_s(self.ended)}"
        )


def _s(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}s"


@dataclass
class Figures:
    runs: int
    seed: int
    kills: list[Kill] = field(default_factory=list)
    checks: dict[str, cr.RunCheck] = field(default_factory=dict)
    id_problems: list[str] = field(default_factory=list)
    dead_letters: Counter[str] = field(default_factory=Counter)
    not_terminal: list[str] = field(default_factory=list)
    projection_diffs: list[str] = field(default_factory=list)
    projections_compared: int = 0  # rows compared
    unreplicated: list[str] = field(default_factory=list)  # streams with one replica
    problems: list[str] = field(default_factory=list)
    wall: float = 0.0
    phases: dict[str, float] = field(default_factory=dict)  # seconds each part took

    def failures(self) -> list[str]:
        out = [f"{c.run_id}: {p}" for c in self.checks.values() for p in c.problems]
        return out + self.id_problems + self.projection_diffs + self.problems

    @property
    def completed(self) -> int:
        return sum(1 for c in self.checks.values() if c.outcome.startswith("completed/"))

    @property
    def ok(self) -> bool:
        return (
            not self.failures()
            and not self.not_terminal
            and not self.dead_letters
            and self.completed == self.runs
            and all(k.rejoined is not None for k in self.kills)
        )

    def lines(self) -> list[str]:
        out = [
            f"runs: {self.runs} in {len(self.kills)} rounds (seed {self.seed}),"
            f" wall {self.wall:.1f}s",
            f"completed: {self.completed}/{self.runs}, not terminal: {len(self.not_terminal)}",
            "outcomes: " + cr._counts(Counter(c.outcome for c in self.checks.values())),
            "attempts: " + cr._counts(Counter(str(c.attempts) for c in self.checks.values())),
            *[k.line() for k in self.kills],
        ]
        for name in ("elected", "restarted", "rejoined", "ended"):
            values = [getattr(k, name) for k in self.kills if getattr(k, name) is not None]
            if values:
                out.append(f"{name} after the kill: median {statistics.median(values):.2f}s,"
                           f" max {max(values):.2f}s")  # fmt: skip
        out += [
            f"projections vs rebuild: {self.projections_compared} rows compared,"
            f" {len(self.projection_diffs)} differences",
            "streams with one replica: " + (", ".join(self.unreplicated) or "none"),
            "dead letters: " + (cr._counts(self.dead_letters) or "none"),
            "phases: " + ", ".join(f"{k} {v:.1f}s" for k, v in self.phases.items()),
        ]
        out += [f"  PROBLEM: {p}" for p in self.failures()[:MAX_SHOWN]]
        out += [f"  NOT TERMINAL: {x}" for x in self.not_terminal[:MAX_SHOWN]]
        return out


@dataclass
class Stored:
    """One message as the stream holds it."""

    seq: int
    subject: str
    msg_id: str | None
    body: dict[str, Any]


# -- reading the streams ------------------------------------------------------------------


async def read_from(
    js: JetStreamContext, stream: str, subject: str, after: int = 0
) -> list[Stored]:
    """`stream`'s messages on `subject` past sequence `after`, to its current end."""
    return [_stored(m) for m in await read_messages(js, stream, subject, after)]


def _stored(msg: Msg) -> Stored:
    try:
        body = json.loads(msg.data)
    except ValueError:
        body = {}
    headers = msg.headers or {}
    return Stored(msg.metadata.sequence.stream, msg.subject, headers.get("Nats-Msg-Id"), body)


def _run_and_event(subject: str) -> tuple[str, str] | None:
    parts = subject.split(".")
    return (parts[4], parts[5]) if len(parts) == 6 else None


class RunWatch:
    """Which runs of ours are live or ended, from NEXUS_RUNS read on as it grows (a core NATS
    subscription would miss what is published while its connection moves to another node)."""

    def __init__(self, js: JetStreamContext, run_ids: list[str], after: int) -> None:
        self.js = js
        self.seen: dict[str, set[str]] = {r: set() for r in run_ids}
        self.after = after

    async def poll(self) -> None:
        try:
            msgs = await read_from(self.js, RUNS, run_events_filter(), self.after)
        except (nats.errors.Error, nats.js.errors.Error, TimeoutError):
            return  # an election in progress: look again at the next poll
        for m in msgs:
            self.after = max(self.after, m.seq)
            parsed = _run_and_event(m.subject)
            if parsed and parsed[0] in self.seen:
                self.seen[parsed[0]].add(parsed[1])

    def ended(self, run_id: str) -> bool:
        return bool(self.seen[run_id] & set(cr.RUN_TERMINAL))

    def live(self) -> int:
        return sum(1 for r, s in self.seen.items() if "turn" in s and not self.ended(r))

    def all_ended(self) -> bool:
        return all(self.ended(r) for r in self.seen)


async def until(probe: Callable[[], Awaitable[bool]], within: float) -> float | None:
    """Seconds until `probe` held, or None if it did not within `within`."""
    start = time.monotonic()
    while time.monotonic() - start < within:
        if await probe():
            return time.monotonic() - start
        await asyncio.sleep(POLL)  # polling the cluster: there is no event to await
    return None


# -- the cluster -------------------------------------------------------------------------


def _state(home: Path) -> StackState:
    state = read_state(home)
    if state is None or not state.nats_nodes:
        raise RuntimeError(f"no clustered dev stack in {home} (`nexus dev up --cluster 3`)")
    return state


async def stream_leader(js: JetStreamContext, stream: str) -> tuple[str | None, datetime | None]:
    """`stream`'s leader and since when it leads, as the JetStream API says, or Nones while
    it cannot say."""
    try:
        info = await js.stream_info(stream)
    except (nats.errors.Error, nats.js.errors.Error, TimeoutError):
        return None, None
    if info.cluster is None:
        return None, None
    return info.cluster.leader, info.cluster.leader_since


async def new_leader(
    target: str, js: JetStreamContext, nodes: list[NatsNode], victim: str, killed: datetime
) -> str | None:
    """The `target`'s leader elected since the kill at `killed`, or None while there is none
    (or only the victim's stale name): the restarted victim itself may win the election."""
    if target == "runs-leader":
        leader, since = await stream_leader(js, RUNS)
        return leader if leader and since is not None and since > killed else None
    survivors = [n for n in nodes if n.name != victim]
    leader = await nats_cluster.meta_leader(survivors)
    if leader != victim:
        return leader
    # The survivors name the victim: only its new process, claiming the lead, makes it so.
    back = [n for n in nodes if n.name == victim]
    return victim if await nats_cluster.meta_leader(back) == victim else None


def node_pid(home: Path, node: str) -> int | None:
    """The node's pid if the state file's process for it is alive and is that nats-server."""
    entry = _state(home).services.get(node)
    if entry is None or entry.pid is None or not entry.alive():
        return None
    try:
        cmdline = psutil.Process(entry.pid).cmdline()
    except psutil.Error:
        return None
    return entry.pid if "nats-server" in " ".join(cmdline) and node in cmdline else None


async def rejoined(js: JetStreamContext, node: str, unreplicated: set[str]) -> bool:
    """Whether every replicated stream has `node` as its leader or as a current replica."""
    try:
        infos = await js.streams_info()
    except (nats.errors.Error, nats.js.errors.Error, TimeoutError):
        return False
    for info in infos:
        cluster = info.cluster
        if (info.config.num_replicas or 1) < 2 or cluster is None:
            unreplicated.add(str(info.config.name))
            continue
        if cluster.leader == node:
            continue
        if not any(r.name == node and r.current and not r.offline for r in cluster.replicas or []):
            return False
    return True


# -- the experiment ------------------------------------------------------------------------


async def retried(call: Callable[[], Awaitable[T]], within: float = 60.0) -> T:
    """`call()`, asked again while JetStream's API is busy electing (timeouts, 503s)."""
    deadline = time.monotonic() + within
    while True:
        try:
            return await call()
        except (nats.errors.Error, nats.js.errors.Error, TimeoutError):
            if time.monotonic() > deadline:
                raise
        await asyncio.sleep(POLL)  # a retry period: the election has no event to await


async def request_runs(bus: Bus, run_ids: list[str]) -> RunWatch:
    """Request `run_ids` (all at once, like a burst of `nexus run`); a watch on them."""
    info = await retried(lambda: bus.js.stream_info(RUNS))
    watch = RunWatch(bus.js, run_ids, info.state.last_seq)
    for run_id in run_ids:
        request = RunRequested(
            agent_id=AGENT_ID, input="Go.", origin=Origin.CLI, requested_by="chaos"
        )
        await bus.publish(
            run_event(run_id, request.event_name), request, msg_id=f"chaos:requested:{run_id}"
        )
    return watch


async def run_round(
    bus: Bus,
    home: Path,
    figures: Figures,
    number: int,
    watch: RunWatch,
    *,
    wait: float,
    on_elected: Callable[[], Awaitable[None]] | None = None,
) -> asyncio.Task[None] | None:
    """Kill the round's target node once all of `watch`'s runs are live; return once a new
    leader answers and the node is back (restarted and caught up), with a task that waits
    for the round's runs to end (the next round need not wait for that). `on_elected` runs
    once the new leader answers (the next round's runs start while the node catches up)."""
    # Probes get a short timeout: an API call that hangs in an election is simply asked again.
    probe_js = bus.nc.jetstream(timeout=PROBE_TIMEOUT)
    target = TARGETS[(number - 1) % len(TARGETS)]
    runs = len(watch.seen)

    async def all_live() -> bool:
        await watch.poll()
        return watch.live() == runs or any(watch.ended(r) for r in watch.seen)

    if await until(all_live, wait) is None:
        figures.problems.append(f"round {number}: runs not live within {wait:.0f}s")
    nodes = _state(home).nats_nodes
    found: list[str] = []

    async def leader_known() -> bool:
        if target == "runs-leader":
            leader = (await stream_leader(probe_js, RUNS))[0]
        else:
            leader = await nats_cluster.meta_leader(nodes)
        found[:] = [leader] if leader else []
        return bool(found)

    await until(leader_known, wait)
    victim = found[0] if found else None
    pid = node_pid(home, victim) if victim else None
    if victim is None or pid is None:
        figures.problems.append(f"round {number}: no live {target} to kill ({victim})")
        return None
    killed = datetime.now(UTC)
    os.kill(pid, signal.SIGKILL)
    kill = Kill(number, target, victim, pid, watch.live())
    figures.kills.append(kill)

    async def restarted() -> bool:
        new = node_pid(home, victim)
        return new is not None and new != pid

    async def elected() -> bool:
        kill.new_leader = await new_leader(target, probe_js, nodes, victim, killed)
        return kill.new_leader is not None

    async def ended() -> bool:
        await watch.poll()
        return watch.all_ended()

    async def runs_end() -> None:
        kill.ended = await until(ended, wait)
        if kill.ended is not None:  # from the kill, not from this task's start
            kill.ended = (datetime.now(UTC) - killed).total_seconds()

    tail = asyncio.create_task(runs_end(), name=f"round {number}: runs end")
    unreplicated: set[str] = set()

    async def back() -> bool:
        return await restarted() and await rejoined(probe_js, victim, unreplicated)

    async def elected_then() -> float | None:
        took = await until(elected, wait)
        if on_elected is not None:
            await on_elected()
        return took

    # Each measured from the kill, side by side.
    kill.elected, kill.restarted, kill.rejoined = await asyncio.gather(
        elected_then(), until(restarted, wait), until(back, wait)
    )
    figures.unreplicated = sorted(set(figures.unreplicated) | unreplicated)
    return tail


RUNNER_ID = re.compile(r"^(?P<run>[^:]+):(?P<attempt>\d+):(?P<event>[a-z_]+):(?P<n>\d+)$")


def check_ids(run_id: str, stored: list[Stored]) -> list[str]:
    """Gaps and repeats in the runner's numbered event ids of `run_id`, per attempt, and any
    message id stored twice."""
    problems = []
    numbers: dict[str, list[int]] = {}
    ids = Counter(m.msg_id for m in stored if m.msg_id)
    for msg_id, count in ids.items():
        if count > 1:
            problems.append(f"{run_id}: message id {msg_id} stored {count} times")
    for m in stored:
        match = RUNNER_ID.match(m.msg_id or "")
        if match and match["run"] == run_id:
            numbers.setdefault(match["attempt"], []).append(int(match["n"]))
    if not numbers:
        problems.append(f"{run_id}: no runner events")
    for attempt, ns in sorted(numbers.items()):
        missing = sorted(set(range(1, max(ns) + 1)) - set(ns))
        if missing:
            problems.append(f"{run_id}: attempt {attempt}'s runner events miss ids {missing[:10]}")
    return problems


def check_runs(figures: Figures, run_ids: list[str], stored: list[Stored]) -> None:
    by_run: dict[str, list[Stored]] = {r: [] for r in run_ids}
    for m in stored:
        parsed = _run_and_event(m.subject)
        if parsed and parsed[0] in by_run:
            by_run[parsed[0]].append(m)
    for run_id, msgs in by_run.items():
        events = [(m.subject.rsplit(".", 1)[-1], m.body) for m in msgs]
        check = cr.check_run(run_id, events, once=False, baseline=cr.SCRIPT_TURNS)
        if check.attempts != 1:
            check.problems.append(f"{check.attempts} attempts: a runner was lost in the election")
        if not check.outcome.startswith("completed/"):
            check.problems.append(f"ended {check.outcome}")
        figures.checks[run_id] = check
        figures.id_problems += check_ids(run_id, msgs)
        if not any(n in cr.RUN_TERMINAL for n, _ in events):
            figures.not_terminal.append(f"{run_id}: last events {[n for n, _ in events[-4:]]}")


async def projection_rows(dsn: str) -> dict[str, list[str]]:
    """Every row of core's read models, as sorted JSON text per table."""
    conn = await asyncpg.connect(dsn)
    try:
        rows: dict[str, list[str]] = {}
        for schema in PROJECTION_SCHEMAS.values():
            tables = await conn.fetch(
                "SELECT table_name FROM information_schema.tables WHERE table_schema = $1"
                " AND table_name <> ALL($2::text[])",
                schema,
                NOT_COMPARED,
            )
            for t in tables:
                name = f'"{schema}"."{t["table_name"]}"'
                data = await conn.fetch(f"SELECT to_jsonb(t)::text AS row FROM {name} t")
                rows[f"{schema}.{t['table_name']}"] = sorted(r["row"] for r in data)
        return rows
    finally:
        await conn.close()


async def compare_projections(figures: Figures, nexus: Nexus, dsn: str, wait: float) -> None:
    """Core's rows now against the rows a rebuild from the streams gives."""

    async def caught_up() -> bool:
        status = await asyncio.to_thread(nexus, "projections", "status", "-o", "json")
        if status.returncode != 0:
            return False
        rows = json.loads(status.stdout).get("projections", [])
        return bool(rows) and all(r.get("behind") == 0 for r in rows)

    took = await until(caught_up, wait)
    if took is None:
        figures.problems.append(f"core's projections did not catch up within {wait:.0f}s")
        return
    figures.phases["projections caught up"] = took
    before = await projection_rows(dsn)
    for name in PROJECTION_SCHEMAS:
        mark = time.monotonic()
        rebuilt = await asyncio.to_thread(nexus, "projections", "rebuild", name, "-o", "json")
        if rebuilt.returncode != 0:
            figures.problems.append(f"rebuild of {name} failed: {rebuilt.stderr or rebuilt.stdout}")
            return
        figures.phases[f"rebuild {name}"] = time.monotonic() - mark
    after = await projection_rows(dsn)
    figures.projections_compared = sum(len(v) for v in before.values())
    for table in sorted(set(before) | set(after)):
        old, new = before.get(table, []), after.get(table, [])
        if old != new:
            only_old = sorted(set(old) - set(new))[:1]
            only_new = sorted(set(new) - set(old))[:1]
            figures.projection_diffs.append(
                f"{table}: {len(old)} rows live, {len(new)} rebuilt; live only {only_old},"
                f" rebuilt only {only_new}"
            )


def apply_agent(nexus: Nexus, workdir: Path) -> None:
    path = workdir / f"{AGENT_ID}.yaml"
    path.write_text(agent_yaml())
    applied = nexus("agents", "apply", "-f", str(path))
    if applied.returncode != 0:
        raise RuntimeError(f"nexus agents apply failed: {applied.stderr or applied.stdout}")


async def run_chaos(
    home: Path,
    nexus: Nexus,
    workdir: Path,
    *,
    rounds: int,
    runs: int,
    seed: int,
    wait: float = 120.0,
) -> Figures:
    """The experiment against a running clustered dev stack at `home`: `rounds` rounds of
    `runs` runs, each with one node killed; `wait`: the most seconds each step may take."""
    # Not for secrets: a seeded generator names the runs repeatably.
    rng = random.Random(seed)  # noqa: S311
    figures = Figures(runs=rounds * runs, seed=seed)
    apply_agent(nexus, workdir)
    prefix = f"clu{seed:x}{rng.randrange(16**4):04x}"
    state = _state(home)
    bus = await Bus.connect(BusSettings(url=state.nats_url or ""), source="chaos")
    start = time.monotonic()
    try:
        dlq_seq = (await bus.js.stream_info(DLQ)).state.last_seq
        tails = []
        ids = [[f"{prefix}-k{k}r{i:02d}" for i in range(runs)] for k in range(1, rounds + 1)]
        all_runs = [r for batch in ids for r in batch]
        watches = [await request_runs(bus, ids[0])]

        async def next_round() -> None:
            # Requested once the last kill's new leader answers, so the runners start up
            # while the killed node catches up; killed only once it is back (two nodes down
            # would be no quorum). The last round's runs may still be finishing meanwhile.
            if len(watches) < rounds:
                watches.append(await request_runs(bus, ids[len(watches)]))

        for number in range(1, rounds + 1):
            tail = await run_round(
                bus, home, figures, number, watches[number - 1], wait=wait, on_elected=next_round
            )
            if len(watches) == number:  # the kill failed: nothing requested the next runs
                await next_round()
            tails += [tail] if tail is not None else []
            figures.phases[f"round {number}"] = (
                time.monotonic() - start - sum(figures.phases.values())
            )
        await asyncio.gather(*tails)
        figures.wall = time.monotonic() - start
        figures.phases["last runs ending"] = figures.wall - sum(figures.phases.values())
        stored = await retried(lambda: read_from(bus.js, RUNS, run_events_filter()))
        dead = await retried(lambda: read_from(bus.js, DLQ, "nexus.dlq.v1.>", dlq_seq))
    finally:
        await bus.close()
    check_runs(figures, all_runs, stored)
    for m in dead:
        figures.dead_letters[f"{m.body.get('service')}: {m.body.get('reason')}"] += 1
    figures.phases["reading the streams"] = time.monotonic() - start - figures.wall
    mark = time.monotonic()
    await compare_projections(figures, nexus, state.database_url or "", wait)
    figures.phases["projections vs rebuild"] = time.monotonic() - mark
    return figures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=6, help="kills, alternating targets")
    parser.add_argument("--runs", type=int, default=10, help="runs live at each kill")
    parser.add_argument("--seed", type=int, default=27)
    parser.add_argument("--wait", type=float, default=180.0, help="most seconds per step")
    args = parser.parse_args()
    if args.rounds < 1 or args.runs < 1:
        parser.error("--rounds and --runs must be at least 1")
    with tempfile.TemporaryDirectory(prefix="nexus-chaos-cluster-") as tmp_name:
        tmp = Path(tmp_name)
        env = devstack.stack_env(tmp, {"NEXUS_HEARTBEAT_INTERVAL": "2"}, drop=("NEXUS_", "OPENAI_"))
        nexus = cli(env, tmp)
        t0 = time.monotonic()
        up = nexus("dev", "up", "--cluster", "3", "--offline-model", "-o", "json", timeout=180)
        if up.returncode != 0:
            print(f"nexus dev up failed: {up.stderr or up.stdout}", file=sys.stderr)
            return 2
        print(f"dev stack (3 NATS nodes) up in {time.monotonic() - t0:.1f}s", flush=True)
        try:
            figures = asyncio.run(
                run_chaos(
                    tmp / ".nexus", nexus, tmp, rounds=args.rounds, runs=args.runs,
                    seed=args.seed, wait=args.wait,
                )
            )  # fmt: skip
        finally:
            nexus("dev", "down", timeout=180)
    print("\n".join(figures.lines()))
    print("OK" if figures.ok else "FAILED")
    return 0 if figures.ok else 1


if __name__ == "__main__":
    sys.exit(main())
