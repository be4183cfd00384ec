"""A local run's start, warm and cold (docs/warm-starts.md): from `start_run` (the dispatch) to
the run's first model call, p50 and p99, the real runner confined by bubblewrap (unconfined
where bwrap does not work here, said so), each run served by the fake model.

- cold: ``python -m nexus_runner --config`` started for the run (as before issue 41);
- warm: the run handed to an idle ``python -m nexus_runner --warm`` of its shape;
- for scale, same run: a bare ``python -c pass`` start+exit, and the raw NATS request-reply
  of handing a run's config (a WarmHandoff) to a process already listening.

Goal (issue 41): warm p50 <= 0.5 s, p99 <= 1 s.
"""

from __future__ import annotations

import asyncio
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from nexus_events.contract.streams import ensure_streams
from nexus_events.events.runs import RunConfig
from nexus_events.events.warm import WarmHandoff
from nexus_events.transport.bus import Bus, BusSettings
from nexus_scheduler.runtime.confinement import Confinement, probe
from nexus_scheduler.runtime.local import LocalProcessRuntime

from tests.fakes.openai_server import FakeOpenAI, Reply, ToolCall

Row = tuple[str, float, str, float]
ROUNDS = 12  # real runners: each start is about a second of CPU on a busy machine
BARE_ROUNDS = 20
REQUEST_ROUNDS = 200
_MARK = "bench-warm-start run "


class FirstCalls:
    """The fake model's script: each run's first call is timed, then the run finishes."""

    def __init__(self) -> None:
        self.first: dict[str, float] = {}

    def __call__(self, body: dict[str, Any]) -> Reply:
        system = str(body["messages"][0]["content"])
        run_id = system.split(_MARK, 1)[1].split(maxsplit=1)[0]
        self.first.setdefault(run_id, time.perf_counter())
        return Reply(tool_calls=(ToolCall("finish", {"summary": "ok"}),))


def _config(run_id: str, base_url: str) -> RunConfig:
    return RunConfig.model_validate(
        {
            "run_id": run_id,
            "agent_id": "bench",
            "system_prompt": f"{_MARK}{run_id} ends at once.",
            "model": {"name": "fake-model", "base_url": base_url},
            "tools": ["finish"],
        }
    )


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


async def _first_calls(
    runtime: LocalProcessRuntime, calls: FirstCalls, base_url: str, label: str, warm: bool
) -> list[float]:
    """Dispatch -> first model call (ms) of `ROUNDS` runs, one at a time."""
    await runtime.start()
    times: list[float] = []
    try:
        if warm:  # the pool learns the agent's shape from a first run
            await _one(runtime, calls, _config(f"{label}-learn", base_url))
        for i in range(ROUNDS):
            if warm:
                await _idle(runtime)
            times.append(await _one(runtime, calls, _config(f"{label}-{i}", base_url)))
    finally:
        await runtime.close()
    return times


async def _idle(runtime: LocalProcessRuntime) -> None:
    assert runtime.warm is not None
    deadline = time.monotonic() + 120
    while runtime.warm.pool.idle_count == 0:
        if time.monotonic() > deadline:
            raise RuntimeError("no warm runner came up in 120 s")
        await asyncio.sleep(0.05)
    await asyncio.sleep(1.0)  # its imports done: it waits on stdin


async def _one(runtime: LocalProcessRuntime, calls: FirstCalls, config: RunConfig) -> float:
    start = time.perf_counter()
    await runtime.start_run(config)
    while (status := await runtime.status(config.run_id)).live:  # noqa: ASYNC110 - a process
        await asyncio.sleep(0.05)
    if status.exit_code != 0 or config.run_id not in calls.first:
        log = (runtime.run_dir(config.run_id) / "runner.log").read_text()
        raise RuntimeError(f"{config.run_id} exited {status.exit_code}:\n{log[-2000:]}")
    return (calls.first[config.run_id] - start) * 1000


async def _bare_start_ms() -> float:
    times = []
    for _ in range(BARE_ROUNDS):
        start = time.perf_counter()
        proc = await asyncio.create_subprocess_exec(sys.executable, "-c", "pass")
        await proc.wait()
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


async def _handoff_request_ms(bus: Bus, config: RunConfig) -> float:
    """A WarmHandoff sent as a NATS request to a listener that validates it and answers."""

    async def answer(msg: Any) -> None:
        WarmHandoff.model_validate_json(msg.data)
        await msg.respond(b"ok")

    sub = await bus.nc.subscribe("bench.warm.handoff", cb=answer)
    payload = WarmHandoff(config=config, env={"NEXUS_RUN_ID": config.run_id}).model_dump_json()
    times = []
    try:
        for _ in range(REQUEST_ROUNDS):
            start = time.perf_counter()
            await bus.nc.request("bench.warm.handoff", payload.encode(), timeout=5)
            times.append((time.perf_counter() - start) * 1000)
    finally:
        await sub.unsubscribe()
    return statistics.median(times)


async def run(nats_url: str) -> list[Row]:
    bwrap = shutil.which("bwrap")
    why = "bwrap is not installed" if bwrap is None else probe(bwrap)
    how = "confined" if why is None else "unconfined"
    bus = await Bus.connect(BusSettings(url=nats_url), source="bench")
    calls = FirstCalls()
    try:
        await ensure_streams(bus.js)
        with tempfile.TemporaryDirectory() as tmp:
            root = Path(tmp)
            env = {
                "NEXUS_NATS_URL": nats_url,
                "NEXUS_BUDGET_RESERVATIONS": "off",
                "NEXUS_WORKSPACE_ROOT": str(root / "workspaces"),
                "OTEL_SDK_DISABLED": "true",
            }
            async with FakeOpenAI(default=calls) as llm:
                results: dict[str, list[float]] = {}
                for label, pool in (("cold", None), ("warm", {"default": 1})):
                    runtime = LocalProcessRuntime(
                        root / f"runs-{label}",
                        command=(sys.executable, "-m", "nexus_runner"),
                        env=env,
                        confinement=Confinement(bwrap) if why is None and bwrap else None,
                        warm_pool=pool,
                    )
                    results[label] = await _first_calls(
                        runtime, calls, llm.base_url, label, warm=pool is not None
                    )
                bare = await _bare_start_ms()
                request = await _handoff_request_ms(bus, _config("handoff", llm.base_url))
    finally:
        await bus.close()
    if why is not None:
        print(f"  (runners unconfined: {why})")
    cold, warm = results["cold"], results["warm"]
    cold50, cold99 = statistics.median(cold), _percentile(cold, 0.99)
    warm50, warm99 = statistics.median(warm), _percentile(warm, 0.99)
    return [
        ("python -c pass start+exit, p50 ms", bare, "", 0.0),
        ("NATS request-reply of a WarmHandoff, p50 ms", request, "", 0.0),
        (
            f"cold dispatch -> first model call, {how}, p50 ms",
            cold50,
            "python -c pass",
            cold50 / bare,
        ),
        (f"cold dispatch -> first model call, {how}, p99 ms", cold99, "", 0.0),
        (f"warm dispatch -> first model call, {how}, p50 ms", warm50, "cold p50", warm50 / cold50),
        (f"warm dispatch -> first model call, {how}, p99 ms", warm99, "cold p99", warm99 / cold99),
    ]
