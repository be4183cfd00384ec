"""Real NATS and PostgreSQL around a flows app: a tiny catalog responder on core's
``catalog.flows.get`` subject and a scripted "runner" that answers run requests with terminal
run events (as core + scheduler + runner would), counting what it was asked."""

from __future__ import annotations

import asyncio
import json
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import asyncpg
import yaml
from nats.aio.msg import Msg
from nexus_events.contract import codec, subjects
from nexus_events.contract.streams import RUNS
from nexus_events.events import (
    ModelSpec,
    RunCancelled,
    RunCompleted,
    RunConfig,
    RunFailed,
    RunPrepared,
    RunRequested,
    RunResult,
)
from nexus_events.events.flows import FlowDefinition, FlowRequested, FlowRunView
from nexus_events.events.queries import FlowDefinitionView
from nexus_events.runtime.clock import Clock
from nexus_events.transport.bus import Bus
from nexus_testing import eventually

from nexus_flows.app import FlowsApp
from nexus_flows.config import FlowsSettings

ROOT = Path(__file__).resolve().parents[4]


def feature_flow() -> FlowDefinition:
    text = (ROOT / "examples" / "flows" / "feature.yaml").read_text()
    return FlowDefinition.model_validate(yaml.safe_load(text))


def flow(doc: dict[str, Any]) -> FlowDefinition:
    return FlowDefinition.model_validate(doc)


class Catalog:
    """Answers ``nexus.core.v1.catalog.flows.get`` like core's catalog would."""

    def __init__(self, bus: Bus, flows: list[FlowDefinition]) -> None:
        self.bus = bus
        self.flows = {f.id: f for f in flows}
        self.asked = 0
        self._sub: Any = None

    async def start(self) -> None:
        self._sub = await self.bus.nc.subscribe(subjects.CORE_CATALOG_FLOWS_GET, cb=self._on)

    async def stop(self) -> None:
        await self._sub.unsubscribe()

    async def _on(self, msg: Msg) -> None:
        self.asked += 1
        query = json.loads(msg.data or b"{}")
        found = self.flows.get(query.get("id"))
        if found is None:
            body = {"error": {"code": 404, "message": f"no flow {query.get('id')!r}", "fields": []}}
            await msg.respond(json.dumps(body).encode())
            return
        await msg.respond(
            FlowDefinitionView(revision=1, definition=found).model_dump_json().encode()
        )


# What the script says about a run: details (completed), ("fail", reason) or None (hold).
Outcome = dict[str, Any] | tuple[str, str] | None
Script = Callable[[str, RunRequested], Outcome]


@dataclass
class FakeRunner:
    """Watches run requests and finishes each run id once (core drops identical re-requests)."""

    bus: Bus
    script: Script
    asked: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    requests: dict[str, RunRequested] = field(default_factory=dict)
    started: list[str] = field(default_factory=list)
    held: set[str] = field(default_factory=set)
    finished: dict[str, str] = field(default_factory=dict)
    # Agent id -> output_schema core would assemble into the run's `prepared`.
    agent_schemas: dict[str, dict[str, Any]] = field(default_factory=dict)
    _subs: list[Any] = field(default_factory=list)
    _tasks: set[asyncio.Task[None]] = field(default_factory=set)

    async def start(self) -> None:
        nc = self.bus.nc
        self._subs.append(
            await nc.subscribe(subjects.run_events_filter(None, "requested"), cb=self._on)
        )
        self._subs.append(
            await nc.subscribe(
                subjects.run_events_filter(None, "cancel_requested"), cb=self._on_cancel
            )
        )

    async def stop(self) -> None:
        for sub in self._subs:
            await sub.unsubscribe()
        for task in list(self._tasks):
            await task

    def _spawn(self, coro: Any) -> None:
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _on(self, msg: Msg) -> None:
        d = codec.decode(msg.subject, msg.data, msg.headers)
        run_id = d.address.ids["run_id"]
        self.asked[run_id] += 1
        if run_id in self.requests:
            return  # a duplicate of the same request: core claims it once
        assert isinstance(d.event, RunRequested)
        self.requests[run_id] = d.event
        self.started.append(run_id)
        self._spawn(self.decide(run_id))

    async def decide(self, run_id: str) -> None:
        req = self.requests[run_id]
        schema = self.agent_schemas.get(req.agent_id)
        if schema is not None:
            config = RunConfig(
                run_id=run_id, agent_id=req.agent_id, system_prompt="x",
                model=ModelSpec(name="m"), output_schema=schema,
            )  # fmt: skip
            await self.bus.publish(
                subjects.run_event(run_id, "prepared"), RunPrepared(config=config)
            )
        outcome = self.script(run_id, req)
        if outcome is None:
            self.held.add(run_id)
            return
        await self.finish(run_id, outcome)

    async def finish(self, run_id: str, outcome: Outcome) -> None:
        self.held.discard(run_id)
        if isinstance(outcome, tuple):
            event: Any = RunFailed(reason=outcome[1], message="scripted failure")
            name = "failed"
        else:
            assert outcome is not None
            branch = outcome.pop("_branch", None)
            event = RunCompleted(
                # A scripted branch was pushed, as the runner's branch of a committing run is.
                result=RunResult(
                    summary=f"did {run_id}",
                    branch=branch,
                    pushed=branch is not None,
                    details=outcome,
                )
            )
            name = "completed"
        self.finished[run_id] = name
        await self.bus.publish(
            subjects.run_event(run_id, name), event, msg_id=f"test:{run_id}:{name}"
        )

    async def _on_cancel(self, msg: Msg) -> None:
        run_id = codec.decode(msg.subject, msg.data, msg.headers).address.ids["run_id"]
        if run_id in self.finished:
            return
        self.finished[run_id] = "cancelled"
        self.held.discard(run_id)
        self._spawn(
            self.bus.publish(
                subjects.run_event(run_id, "cancelled"),
                RunCancelled(),
                msg_id=f"test:{run_id}:cancelled",
            )
        )

    def step_of(self, run_id: str) -> str:
        return self.requests[run_id].labels["step"]


def settings() -> FlowsSettings:
    return FlowsSettings(
        health_port=None,
        timer_interval=0.1,
        fetch_timeout=0.2,
        catalog_retry=0.3,
        catalog_timeout=1.0,
    )


async def start_app(bus: Bus, pool: asyncpg.Pool[Any], clock: Clock | None = None) -> FlowsApp:
    app = FlowsApp(settings(), bus=bus, pool=pool, clock=clock)
    await app.start()
    return app


async def request_flow(bus: Bus, flow_run_id: str, flow_id: str, **kw: Any) -> None:
    await bus.publish(
        subjects.flow_event(flow_run_id, "requested"), FlowRequested(flow=flow_id, **kw)
    )


async def get_flow(bus: Bus, flow_run_id: str) -> FlowRunView | None:
    reply = await bus.nc.request(
        subjects.FLOWS_GET, json.dumps({"flow_run_id": flow_run_id}).encode(), timeout=5
    )
    body = json.loads(reply.data)
    if "error" in body:
        return None
    return FlowRunView.model_validate(body)


async def wait_status(
    bus: Bus,
    flow_run_id: str,
    status: str,
    within: float = 20.0,
    detail: Callable[[], str] | None = None,
) -> FlowRunView:
    view = await eventually(
        lambda: get_flow(bus, flow_run_id),
        lambda v: v is not None and v.status == status,
        within=within,
        what=f"flow {flow_run_id} {status}",
        detail=detail,
    )
    assert isinstance(view, FlowRunView)
    return view


async def stored_requests(bus: Bus) -> dict[str, int]:
    """How many `requested` events NEXUS_RUNS stored per run id."""
    counts: dict[str, int] = defaultdict(int)
    async for msg in bus.replay_raw(
        RUNS, filter_subject=subjects.run_events_filter(None, "requested")
    ):
        counts[msg.subject.split(".")[4]] += 1
    return dict(counts)


async def stored(bus: Bus, stream: str, subject: str) -> list[Any]:
    out = []
    async for msg in bus.replay_raw(stream, filter_subject=subject):
        out.append(codec.decode(msg.subject, msg.data, msg.headers).event)
    return out
