"""The lab (issue 39): what a replay of a recorded run costs, and what an eval case adds to a
plain run.

(a) Replay of a recorded TURNS-turn run with no divergence. The runner in-process
(`execute_run`, as bench_resume's (b)) on the bench's nats-server records a run against the
fake OpenAI server (a `list_files` call a turn, then `finish`); then a replay of it
(`RunConfig.lab`, mode replay) runs the same turns with every reply served from the recording.
Wall time of each, and the replay's ratio to the original, twice: with the fake model
answering at once (the runner's own cost: reading the recording, comparing requests) and with
MODEL_DELAY seconds after each streamed chunk (a model's latency, which a replay does not pay).

(b) The eval runner's overhead per case, on a real local stack (`nexus dev up
--offline-model`: core, scheduler, the lab, real runners): CASES cases of a suite run by the
lab (`nexus eval run --wait`, one revision, one trial, concurrency 1), beside the same CASES
runs started one after another with `nexus run --wait` in the same stack. Overhead per case =
(eval wall time - plain wall time) / CASES.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from nexus_events.contract import subjects
from nexus_events.contract.runstate import RunEvent
from nexus_events.contract.streams import RUNS, ensure_streams
from nexus_events.events.lab_specs import LabSpec
from nexus_events.events.runs import RunCompleted, RunConfig, RunPrepared, RunTurn
from nexus_events.transport.bus import Bus, BusSettings, decode_msg
from nexus_runner.app import execute_run
from nexus_runner.config import RunnerSettings

from bench.bench_runner import _script
from scripts import chaos_flows
from tests.fakes.openai_server import FakeOpenAI
from tests.support import devstack

Row = tuple[str, float, str, float]

TURNS = 50
MODEL_DELAY = 0.05  # seconds after each streamed chunk of the slow model in (a)
CASES = 5  # (b)

AGENT = """\
id: bench-lab
role: implementer
model: {name: offline}
system_prompt: "[offline-model:eval-lenient] You answer."
tools: [read_file]
"""


def _suite(cases: int) -> str:
    lines = ["id: bench-lab", "agent: bench-lab", "cases:"]
    lines += [f"  - {{id: c{i}, input: 'answer: {i}'}}" for i in range(cases)]
    return "\n".join(lines) + "\n"


def _config(base_url: str, **extra: Any) -> RunConfig:
    return RunConfig.model_validate(
        {
            "run_id": f"bench-{uuid.uuid4().hex[:8]}",
            "agent_id": "bench",
            "system_prompt": "bench",
            "input": "go",
            "model": {"name": "m", "base_url": base_url},
            "tools": ["list_files", "finish"],
            "budgets": {"max_turns": TURNS + 10},
            **extra,
        }
    )


async def _timed(config: RunConfig, settings: RunnerSettings, bus: Bus) -> float:
    started = time.perf_counter()
    terminal = await execute_run(config, settings, bus)
    elapsed = time.perf_counter() - started
    assert isinstance(terminal, RunCompleted), terminal
    assert terminal.reason != "diverged", terminal.message
    return elapsed


async def _replay_pair(nats_url: str, delay: float) -> tuple[float, float, int]:
    """(original seconds, replay seconds, live model calls during the replay)."""
    bus = await Bus.connect(BusSettings(url=nats_url, name="bench-lab"), source="runner")
    await ensure_streams(bus.js)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            settings = RunnerSettings(
                workspace_root=Path(tmp),
                stuck_idle_turns=TURNS + 10,
                heartbeat_interval=1.0,
                budget_reservations="off",  # the runner alone: no spend service
            )
            script = _script(TURNS)

            def slow(body: dict[str, Any]) -> Any:
                # A slow model: `delay` after each streamed chunk (a reply is a few chunks).
                step = script(body)
                return dataclasses.replace(step, chunk_delay=delay, chunk_size=1 << 20)

            async with FakeOpenAI(default=slow) as llm:
                source = _config(llm.base_url)
                await bus.publish(
                    subjects.run_event(source.run_id, RunEvent.PREPARED), RunPrepared(config=source)
                )
                original = await _timed(source, settings, bus)
                asked = len(llm.requests)
                replay = source.model_copy(
                    update={
                        "run_id": f"bench-{uuid.uuid4().hex[:8]}",
                        "lab": LabSpec.model_validate(
                            {"mode": "replay", "source_run_id": source.run_id}
                        ),
                    }
                )
                replayed = await _timed(replay, settings, bus)
                live = len(llm.requests) - asked
            turns = [
                e
                async for e in _events(bus, replay.run_id)
                if isinstance(e, RunTurn) and e.replayed
            ]
            assert len(turns) == TURNS, f"{len(turns)} replayed turns of {TURNS}"
    finally:
        await bus.close()
    return original, replayed, live


async def _events(bus: Bus, run_id: str) -> Any:
    async for msg in bus.replay_raw(RUNS, filter_subject=subjects.run_events_filter(run_id)):
        yield decode_msg(msg).event


async def _eval_overhead() -> tuple[float, float]:
    """(b): (eval wall seconds, plain runs wall seconds) for CASES cases."""
    with tempfile.TemporaryDirectory(prefix="nxbench-lab-") as name:
        tmp = Path(name)
        path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
        env = devstack.stack_env(tmp, {"PATH": path}, drop=("NEXUS_", "OPENAI_"))
        nexus = chaos_flows.cli(env, tmp)
        up = await asyncio.to_thread(nexus, "dev", "up", "--offline-model", "-o", "json",
                                     timeout=180)  # fmt: skip
        if up.returncode != 0:
            raise RuntimeError(f"nexus dev up failed: {up.stderr}")
        try:
            (tmp / "agent.yaml").write_text(AGENT)
            (tmp / "suite.yaml").write_text(_suite(CASES))
            for cmd in (
                ("agents", "apply", "-f", str(tmp / "agent.yaml")),
                ("eval", "apply", str(tmp / "suite.yaml")),
            ):
                done = await asyncio.to_thread(nexus, *cmd, timeout=60)
                if done.returncode != 0:
                    raise RuntimeError(f"nexus {' '.join(cmd)}: {done.stderr}")
            started = time.perf_counter()
            for i in range(CASES):
                done = await asyncio.to_thread(
                    nexus, "run", "bench-lab", "--input", f"answer: {i}", "--follow",
                    "--wait", "170", timeout=180,
                )  # fmt: skip
                if done.returncode != 0:
                    raise RuntimeError(f"nexus run: {done.stderr}")
            plain = time.perf_counter() - started
            started = time.perf_counter()
            done = await asyncio.to_thread(
                nexus, "eval", "run", "bench-lab", "--agent", "bench-lab@1",
                "--concurrency", "1", "--wait", timeout=600,
            )  # fmt: skip
            if done.returncode != 0:
                raise RuntimeError(f"nexus eval run: {done.stdout} {done.stderr}")
            evaluated = time.perf_counter() - started
        finally:
            await asyncio.to_thread(nexus, "dev", "down", timeout=120)
    return evaluated, plain


async def run(nats_url: str) -> list[Row]:
    rows: list[Row] = []
    for label, delay in (
        ("instant model", 0.0),
        (f"model {MODEL_DELAY * 1000:.0f} ms a chunk", MODEL_DELAY),
    ):
        original, replayed, live = await _replay_pair(nats_url, delay)
        rows.append((f"(a) {label}: {TURNS}-turn run, ms", original * 1000, "", 0.0))
        rows.append(
            (f"(a) {label}: its replay, ms ({live} model calls)", replayed * 1000,
             "the original run", replayed / original)
        )  # fmt: skip
    evaluated, plain = await _eval_overhead()
    per_case = (evaluated - plain) / CASES
    rows.append((f"(b) {CASES} plain `nexus run --wait`, s", plain, "", 0.0))
    rows.append(
        (f"(b) the same {CASES} cases by the lab, s", evaluated, "plain runs", evaluated / plain)
    )
    rows.append(("(b) eval overhead per case, ms", per_case * 1000, "a plain run",
                 per_case / (plain / CASES)))  # fmt: skip
    return rows
