"""Real NATS, PostgreSQL and core around a lab app: a scripted "runner" that ends each case
run core prepared by publishing its `completed` (what the runner would) with the details the
script gives for its agent revision, counting what it was asked."""

from __future__ import annotations

import asyncio
import json
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import asyncpg
from nats.aio.msg import Msg
from nexus_events.contract import codec, subjects
from nexus_events.contract.runstate import RunEvent
from nexus_events.contract.streams import EVALS, RUNS
from nexus_events.events import RunCompleted, RunRequested, RunResult, ToolCalled
from nexus_events.events.evals import EvalApplied, EvalReport, EvalRequested, EvalSuite
from nexus_events.transport.bus import Bus
from nexus_events.transport.catalog_commands import apply_agent
from nexus_events.transport.micro import read_reply
from nexus_testing import eventually

from nexus_lab.app import LabApp
from nexus_lab.config import LabSettings

AGENT = """
id: implementer
role: implementer
model: {name: test-model}
system_prompt: {prompt}
tools: [read_file]
"""

# The details a case run ends with: (run request) -> details, or None to hold the run.
Script = Callable[[RunRequested], dict[str, Any] | None]


async def apply_agents(bus: Bus, revisions: int, agent_id: str = "implementer") -> None:
    for n in range(1, revisions + 1):
        text = AGENT.replace("{prompt}", f"You implement tasks, take {n}.")
        await apply_agent(bus, text.replace("id: implementer", f"id: {agent_id}"))


async def apply_suite(bus: Bus, suite: dict[str, Any]) -> None:
    parsed = EvalSuite.model_validate(suite)
    await bus.publish(
        subjects.catalog_event(subjects.CatalogKind.EVAL, parsed.id, "applied"),
        EvalApplied(suite=parsed, applied_by="test"),
    )


@dataclass
class ScriptedRunner:
    """Ends every run core prepares once, as the script says; holds the others until
    `release`. Records the requests (from NEXUS_RUNS) and the most runs live at once."""

    bus: Bus
    script: Script
    # The tools a run calls before it ends (its `tool_called` events), by request.
    tools: Callable[[RunRequested], list[str]] = lambda _: []
    requests: dict[str, RunRequested] = field(default_factory=dict)
    ended: set[str] = field(default_factory=set)
    held: set[str] = field(default_factory=set)
    most_live: int = 0
    # Why a run could not be ended (core never knew it): shown by `diagnosis`.
    errors: list[str] = field(default_factory=list)
    _sub: Any = None
    _tasks: set[asyncio.Task[None]] = field(default_factory=set)

    async def start(self) -> None:
        self._sub = await self.bus.nc.subscribe(
            subjects.run_events_filter(None, RunEvent.REQUESTED), cb=self._on
        )
        RUNNERS.append(self)  # stopped by the `runner` fixture, shown by `diagnosis`

    async def stop(self) -> None:
        await self._sub.unsubscribe()
        for task in list(self._tasks):
            await task

    async def _on(self, msg: Msg) -> None:
        d = codec.decode(msg.subject, msg.data, msg.headers)
        run_id = d.address.ids["run_id"]
        if run_id in self.requests or not isinstance(d.event, RunRequested):
            return
        self.requests[run_id] = d.event
        live = len(set(self.requests) - self.ended)
        self.most_live = max(self.most_live, live)
        task = asyncio.create_task(self._end(run_id))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _end(self, run_id: str) -> None:
        try:
            await self._prepared_then_end(run_id)
        except AssertionError as exc:
            self.errors.append(str(exc).splitlines()[0])
            raise

    async def _prepared_then_end(self, run_id: str) -> None:
        # Core prepares the run first (its request is real); then "the runner" ends it.
        await eventually(
            lambda: core_run_status(self.bus, run_id),
            lambda s: s is not None,
            within=20,
            what=f"core knows {run_id}",
        )
        details = self.script(self.requests[run_id])
        if details is None:
            self.held.add(run_id)
            return
        await self.finish(run_id, details)

    async def finish(self, run_id: str, details: dict[str, Any]) -> None:
        self.held.discard(run_id)
        self.ended.add(run_id)
        for n, tool in enumerate(self.tools(self.requests[run_id]), start=1):
            called = ToolCalled(turn=n, call_id=f"c{n}", tool=tool)
            await self.bus.publish(subjects.run_event(run_id, RunEvent.TOOL_CALLED), called)
        completed = RunCompleted(
            result=RunResult(summary=f"did {run_id}", details=details, tests_passed=True),
            tokens_in=100,
            tokens_out=10,
            cost_usd=0.01,
        )
        await self.bus.publish(
            subjects.run_event(run_id, RunEvent.COMPLETED), completed, msg_id=f"t:{run_id}:end"
        )

    async def release(self, script: Script) -> None:
        self.script = script
        for run_id in sorted(self.held):
            details = script(self.requests[run_id])
            assert details is not None
            await self.finish(run_id, details)


async def core_run_status(bus: Bus, run_id: str) -> str | None:
    msg = await bus.nc.request(
        subjects.CORE_RUNS_GET, json.dumps({"run_id": run_id}).encode(), timeout=5
    )
    reply = read_reply(msg)
    if reply.error_code is not None:
        return None
    return str(reply.data.get("status"))


def settings() -> LabSettings:
    return LabSettings(health_port=None, fetch_timeout=0.2, retry_interval=0.2)


# The labs and scripted runners a test started, for the diagnosis a failed wait prints (the
# fixtures empty them).
STARTED: list[LabApp] = []
RUNNERS: list[ScriptedRunner] = []


async def start_lab(bus: Bus, pool: asyncpg.Pool[Any]) -> LabApp:
    app = LabApp(settings(), bus=bus, pool=pool)
    STARTED.append(app)
    await app.start()
    return app


def diagnosis() -> str:
    """What each lab of the test was doing: its role, its projection's position and errors,
    its engine's passes and what it waits on (printed only when a wait fails)."""
    lines = []
    for n, app in enumerate(STARTED):
        role = app.leadership.role if app.leadership is not None else None
        line = f"lab {n}: role={role}"
        if app.runner is not None:
            r = app.runner
            line += (
                f" projection last_seq={r.last_seq} applied={r.applied} fenced={r.fenced}"
                f" failures={r.consecutive_failures} last_error={r.last_error}"
            )
        if app.engine is not None:
            e = app.engine
            line += (
                f" engine steps={e._passes.steps} failures={e._passes.failures}"
                f" waiting={sorted(e._waiting)} touched={sorted(e._touched)}"
                f" requested={len(e._requested)} ended={len(e._ended)}"
            )
        lines.append(line)
    for r in RUNNERS:
        live = sorted(set(r.requests) - r.ended - r.held)
        lines.append(f"runner: asked={len(r.requests)} ended={len(r.ended)} live={live}")
        lines += [f"  {e}" for e in r.errors]
    return "\n".join(lines)


async def request_eval(bus: Bus, eval_run_id: str, **kw: Any) -> None:
    await bus.publish(
        subjects.eval_event(eval_run_id, "requested"), EvalRequested.model_validate(kw)
    )


async def query(bus: Bus, subject: str, body: dict[str, Any]) -> Any:
    msg = await bus.nc.request(subject, json.dumps(body).encode(), timeout=5)
    return read_reply(msg)


async def get_report(bus: Bus, eval_run_id: str) -> EvalReport | None:
    reply = await query(bus, subjects.LAB_EVALS_GET, {"eval_run_id": eval_run_id})
    return None if reply.error_code is not None else EvalReport.model_validate(reply.data)


async def wait_report(bus: Bus, eval_run_id: str, status: str, within: float = 60) -> EvalReport:
    found = await eventually(
        lambda: get_report(bus, eval_run_id),
        lambda r: r is not None and r.status == status,
        within=within,
        what=f"eval run {eval_run_id} {status}",
        detail=diagnosis,
    )
    assert isinstance(found, EvalReport)
    return found


async def stored_requests(bus: Bus) -> dict[str, int]:
    """How many `requested` events NEXUS_RUNS stored per run id."""
    counts: dict[str, int] = defaultdict(int)
    async for msg in bus.replay_raw(
        RUNS, filter_subject=subjects.run_events_filter(None, RunEvent.REQUESTED)
    ):
        counts[msg.subject.split(".")[4]] += 1
    return dict(counts)


async def stored_eval_events(bus: Bus, eval_run_id: str) -> list[Any]:
    out = []
    async for msg in bus.replay_raw(EVALS, filter_subject=subjects.eval_events_filter(eval_run_id)):
        out.append(codec.decode(msg.subject, msg.data, msg.headers).event)
    return out
