"""Resume (issue 24): how long a run is away after its runner is SIGKILLed, and what the
write-ahead transcript costs a turn.

(a) Resume latency on a real local stack: `nexus dev up --offline-model` in a temporary home
(its own nats-server, PostgreSQL, core, scheduler with the local runtime), then ROUNDS rounds
of scripts/chaos_resume.py, each PER_ROUND runs of the offline model's `resume` script
SIGKILLed at a random turn and one control run nobody kills. From the SIGKILL to the new
attempt's first model call answered (its first `turn` event), p50 and p99; with the parts:
SIGKILL -> the scheduler's `resuming` (detection: the runtime's exit seen, the exit grace of
1 s as the e2e stack sets it), and the resumed attempt's `dispatched` -> first model call
(a runner's start, restore included). Baseline, same run: a first attempt's `dispatched` ->
first model call (a runner's cold start, no restore).

(b) The transcript's cost per turn: `execute_run` (the runner in-process, on the bench's
nats-server, the fake OpenAI server, a `list_files` turn after turn) with its write-ahead
transcript, beside the same runner with the transcript writer replaced by one that writes
nothing, interleaved for ROUNDS_B rounds; the marginal turn (TURNS vs SHORT turns) of each,
median. Also: the transcript writer alone on one turn's two messages (an assistant message
with a tool call and a 2 KB tool result, then the flush before the next model call), against
raw nats-py JetStream publishes of the same payloads (pipelined, both acks awaited).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import os
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from unittest import mock

from nexus_events.contract import subjects
from nexus_events.contract.streams import ensure_streams
from nexus_events.events.runs import RunCompleted, RunConfig
from nexus_events.events.transcripts import TranscriptEntry
from nexus_events.transport.bus import Bus, BusSettings
from nexus_runner import resuming
from nexus_runner.app import execute_run
from nexus_runner.config import RunnerSettings
from nexus_runner.transcript import TranscriptWriter

from bench.bench_runner import _script
from scripts import chaos_flows, chaos_resume
from tests.fakes.openai_server import FakeOpenAI
from tests.support import devstack

Row = tuple[str, float, str, float]

ROUNDS = 6  # (a): chaos rounds
PER_ROUND = 3  # (a): killed runs a round
TURNS = 40  # (b): a run's turns, and the short run's, for the marginal turn
SHORT = 10
ROUNDS_B = 5
WRITER_TURNS = 400  # (b): turns of the writer alone
TOOL_OUTPUT = "x" * 2000  # (b): one turn's tool result, as the model sees it


def _pct(samples: list[float]) -> tuple[float, float]:
    return chaos_resume.percentiles(samples) if samples else (float("nan"), float("nan"))


async def _latency() -> dict[str, Any]:
    """(a): the figures of ROUNDS chaos rounds on a fresh dev stack."""
    with tempfile.TemporaryDirectory(prefix="nxbench-resume-") as name:
        tmp = Path(name)
        path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
        extra = {"PATH": path, "NEXUS_HEARTBEAT_INTERVAL": "2"}
        env = devstack.stack_env(tmp, extra, drop=("NEXUS_", "OPENAI_"))
        nexus = chaos_flows.cli(env, tmp)
        up = await asyncio.to_thread(nexus, "dev", "up", "--offline-model", "-o", "json",
                                     timeout=180)  # fmt: skip
        if up.returncode != 0:
            raise RuntimeError(f"nexus dev up failed: {up.stderr or up.stdout}")
        out: dict[str, Any] = {k: [] for k in ("turn", "resuming", "resumed", "fresh", "again")}
        out.update(completed=0, runs=0, problems=[])
        try:
            await asyncio.to_thread(chaos_resume.apply_agents, nexus, tmp)
            started = time.monotonic()
            for seed in range(ROUNDS):
                f = await chaos_resume.run_chaos(
                    tmp / ".nexus", nexus, tmp, runs=PER_ROUND, seed=seed, lost_runs=0,
                    wait=180, apply=False,
                )  # fmt: skip
                out["turn"] += f.to_turn
                out["resuming"] += f.to_resuming
                out["resumed"] += f.to_resumed
                out["fresh"] += f.fresh_start
                out["again"] += f.resumed_start
                out["completed"] += f.completed
                out["runs"] += f.runs
                out["problems"] += f.problems + f.failures()
            out["wall"] = time.monotonic() - started
        finally:
            await asyncio.to_thread(nexus, "dev", "down", timeout=180)
        return out


class _NoTranscript(TranscriptWriter):
    """Today's runner: the loop adds its messages as before, nothing is written."""

    async def _write(self, entry: TranscriptEntry) -> None:
        self.next_index += 1


@contextlib.contextmanager
def _transcript(on: bool) -> Iterator[None]:
    if on:
        yield
        return
    with mock.patch.object(resuming, "TranscriptWriter", _NoTranscript):
        yield


async def _runner_turn(base_url: str, nats_url: str, turns: int, *, transcript: bool) -> float:
    """Seconds a turn of `execute_run` (bench/bench_runner.py's run), with or without."""
    bus = await Bus.connect(BusSettings(url=nats_url, name="bench-resume"), source="runner")
    await ensure_streams(bus.js)
    with tempfile.TemporaryDirectory() as tmp, _transcript(transcript):
        settings = RunnerSettings(
            workspace_root=Path(tmp),
            stuck_idle_turns=turns + 10,
            heartbeat_interval=1.0,
            budget_reservations="off",  # the runner alone: no spend service
        )
        config = RunConfig.model_validate(
            {
                "run_id": f"bench-{uuid.uuid4().hex[:8]}",
                "agent_id": "bench",
                "system_prompt": "bench",
                "input": "go",
                "model": {"name": "m", "base_url": base_url},
                "tools": ["list_files", "finish"],
                "budgets": {"max_turns": turns + 10},
            }
        )
        started = time.perf_counter()
        terminal = await execute_run(config, settings, bus)
        elapsed = time.perf_counter() - started
    await bus.close()
    assert isinstance(terminal, RunCompleted), terminal
    return elapsed / turns


def _turn_messages(turn: int) -> list[dict[str, Any]]:
    call = {
        "id": f"call_{turn}",
        "type": "function",
        "function": {"name": "list_files", "arguments": json.dumps({"pattern": f"*{turn}"})},
    }
    return [
        {"role": "assistant", "content": "ok", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": f"call_{turn}", "content": TOOL_OUTPUT},
    ]  # fmt: skip


async def _writer(nats_url: str) -> tuple[float, float]:
    """Seconds a turn: the transcript writer's two entries and flush; raw nats-py publishes
    of the same bytes (both sent, both acks awaited)."""
    bus = await Bus.connect(BusSettings(url=nats_url, name="bench-transcript"), source="runner")
    await ensure_streams(bus.js)
    run_id = f"bench-{uuid.uuid4().hex[:8]}"
    writer = TranscriptWriter(bus, run_id, 1)
    started = time.perf_counter()
    for turn in range(WRITER_TURNS):
        for message in _turn_messages(turn):
            await writer.message(message)
        await writer.flush()
    written = (time.perf_counter() - started) / WRITER_TURNS
    raw_run = f"bench-{uuid.uuid4().hex[:8]}"
    subject = subjects.run_transcript(raw_run)
    encoded = [
        bus.encode(
            subject,
            TranscriptEntry(attempt=1, index=2 * turn + i, op="message", message=message),
            msg_id=f"{raw_run}:1:t:{2 * turn + i}",
        )
        for turn in range(WRITER_TURNS)
        for i, message in enumerate(_turn_messages(turn))
    ]
    js = bus.nc.jetstream()
    started = time.perf_counter()
    for turn in range(WRITER_TURNS):
        acks = [
            await js.publish_async(e.subject, e.body, headers=e.headers)
            for e in encoded[2 * turn : 2 * turn + 2]
        ]
        await asyncio.gather(*acks)
    raw = (time.perf_counter() - started) / WRITER_TURNS
    await bus.close()
    return written, raw


async def _transcript_cost(nats_url: str) -> dict[str, float]:
    """(b): medians over ROUNDS_B interleaved rounds, seconds."""
    for on in (True, False):  # warm up both
        async with FakeOpenAI(default=_script(SHORT)) as llm:
            await _runner_turn(llm.base_url, nats_url, SHORT, transcript=on)
    marginal: dict[bool, list[float]] = {True: [], False: []}
    per_turn: dict[bool, list[float]] = {True: [], False: []}
    for _ in range(ROUNDS_B):
        for on in (True, False):
            t = {}
            for n in (TURNS, SHORT):
                async with FakeOpenAI(default=_script(n)) as llm:
                    gc.collect()
                    t[n] = await _runner_turn(llm.base_url, nats_url, n, transcript=on)
            per_turn[on].append(t[TURNS])
            marginal[on].append((t[TURNS] * TURNS - t[SHORT] * SHORT) / (TURNS - SHORT))
    await _writer(nats_url)  # warm-up
    writes = [await _writer(nats_url) for _ in range(3)]
    return {
        "with": statistics.median(per_turn[True]),
        "without": statistics.median(per_turn[False]),
        "m_with": statistics.median(marginal[True]),
        "m_without": statistics.median(marginal[False]),
        "writer": statistics.median(w for w, _ in writes),
        "raw": statistics.median(r for _, r in writes),
    }


async def run(nats_url: str) -> list[Row]:
    b = await _transcript_cost(nats_url)
    a = await _latency()
    t50, t99 = _pct(a["turn"])
    d50, d99 = _pct(a["resuming"])
    f50, f99 = _pct(a["fresh"])
    r50, r99 = _pct(a["again"])
    ms = 1000.0
    rows: list[Row] = [
        (f"runs killed, completed ({ROUNDS} rounds of {PER_ROUND} + control)",
         a["completed"], f"of {a['runs']}", a["completed"] / max(1, a["runs"])),
        ("SIGKILL -> new attempt's first model call p50 (ms)", t50 * ms,
         "fresh dispatched->1st call p50", t50 / f50),
        ("SIGKILL -> new attempt's first model call p99 (ms)", t99 * ms,
         "fresh dispatched->1st call p99", t99 / f99),
        ("  SIGKILL -> resuming (detection) p50 (ms)", d50 * ms, "", 0.0),
        ("  SIGKILL -> resuming (detection) p99 (ms)", d99 * ms, "", 0.0),
        ("  resumed attempt dispatched -> 1st model call p50 (ms)", r50 * ms,
         "fresh dispatched->1st call p50", r50 / f50),
        ("  resumed attempt dispatched -> 1st model call p99 (ms)", r99 * ms,
         "fresh dispatched->1st call p99", r99 / f99),
        ("fresh attempt dispatched -> 1st model call p50 (ms)", f50 * ms, "", 0.0),
        ("runner with transcript, us/turn", b["with"] * 1e6,
         "runner without", b["with"] / b["without"]),
        ("runner without transcript (today's), us/turn", b["without"] * 1e6, "", 0.0),
        (f"marginal turn ({SHORT}->{TURNS}) with transcript, us", b["m_with"] * 1e6,
         "without", b["m_with"] / b["m_without"]),
        ("marginal turn without transcript, us", b["m_without"] * 1e6, "", 0.0),
        ("transcript cost per turn (marginal difference), us",
         (b["m_with"] - b["m_without"]) * 1e6, "", 0.0),
        ("transcript writer alone: 2 entries + flush, us/turn", b["writer"] * 1e6,
         "raw nats-py, same bytes", b["writer"] / b["raw"]),
        ("raw nats-py: 2 publishes, both acks, us/turn", b["raw"] * 1e6, "", 0.0),
    ]  # fmt: skip
    for problem in a["problems"][:5]:
        print(f"  resume bench PROBLEM: {problem}", file=sys.stderr)
    mean = statistics.fmean(a["turn"]) if a["turn"] else float("nan")
    print(f"  ({len(a['turn'])} resumes, {mean:.2f} s mean; (a) took {a['wall']:.0f} s)",
          file=sys.stderr)  # fmt: skip
    return rows
