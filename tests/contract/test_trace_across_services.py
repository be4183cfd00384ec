"""One run is one connected trace across core, the scheduler and the runner (docs/design.md §11).

Core (`CoreApp`) and the scheduler (`SchedulerApp` with the local runtime) run in this
process and export to an in-memory exporter; the runner is the real ``python -m
nexus_runner`` process the local runtime starts, which gets the trace context in
``TRACEPARENT`` and writes its spans to a JSON-lines file (``NEXUS_OTEL_SPANS_FILE``), flushed
before it exits. The model is the fake OpenAI server, scripted to write a file and finish in
one turn. The run is requested inside a client span, as a CLI or API would.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import asyncpg
import pytest
from nexus_core.app import CoreApp
from nexus_core.config import CoreSettings
from nexus_events.contract import subjects
from nexus_events.contract.streams import RUNS
from nexus_events.events import RunCompleted, RunRequested
from nexus_events.runtime import telemetry
from nexus_events.transport.bus import Bus, BusSettings
from nexus_events.transport.catalog_commands import apply_agent, apply_skill
from nexus_scheduler.app import SchedulerApp
from nexus_scheduler.config import SchedulerSettings
from nexus_scheduler.runtime.local import LocalProcessRuntime
from nexus_testing import eventually
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from ..fakes.openai_server import FakeOpenAI, Reply, ToolCall

AGENT_YAML = """
id: tracer
role: implementer
model: {name: fake-model}
system_prompt: You implement tasks.
skills: [python]
tools: [write_file, finish]
permissions: {can_commit: true}
"""
SKILL_MD = "---\nname: python\nversion: 1.0.0\n---\n# Python\nUse uv.\n"
REQUEST_SPAN = "client request run"


@pytest.fixture
def exporter(monkeypatch: pytest.MonkeyPatch) -> Iterator[InMemorySpanExporter]:
    # A provider for this test only (as in core's and nexus_events' telemetry tests).
    monkeypatch.setattr(telemetry, "_installed", {})
    spans = InMemorySpanExporter()
    provider = telemetry.setup_telemetry("trace-test", exporter=spans, env={})
    assert provider is not None
    yield spans
    provider.shutdown()


@pytest.fixture
async def pool(pg_dsn: str) -> AsyncIterator[asyncpg.Pool[Any]]:
    p = await asyncpg.create_pool(pg_dsn, min_size=1, max_size=12)
    assert p is not None
    try:
        yield p
    finally:
        await p.close()


def _service_of(span: dict[str, Any]) -> str:
    """Which service made a span: by name (core and scheduler share this process' provider),
    or by the resource's service.name (the runner process)."""
    if span["service"] == "nexus-runner":
        return "runner"
    name = span["name"]
    for service in ("core", "scheduler"):
        if name.startswith(f"{service} "):
            return service
    return "client" if name == REQUEST_SPAN else "bus"  # "consume <durable>" batch spans


def _memory_spans(exporter: InMemorySpanExporter) -> list[dict[str, Any]]:
    return [telemetry.span_record(s) for s in exporter.get_finished_spans()]


def _file_spans(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


async def test_a_run_is_one_connected_trace_across_the_three_services(
    bus: Bus,
    nats_url: str,
    pool: asyncpg.Pool[Any],
    tmp_path: Path,
    exporter: InMemorySpanExporter,
) -> None:
    run_id = f"r-trace-{uuid.uuid4().hex[:8]}"
    spans_file = tmp_path / "runner-spans.jsonl"
    script = [
        Reply(
            tool_calls=(
                ToolCall("write_file", {"path": "hello.txt", "content": "hi"}),
                ToolCall("finish", {"summary": "wrote hello"}),
            ),
            prompt_tokens=42,
            completion_tokens=7,
        )
    ]
    core = CoreApp(
        CoreSettings(health_port=0, memory_timeout=0.2, projection_batch=200, fetch_timeout=0.2),
        bus=bus,
        pool=pool,
    )
    async with FakeOpenAI(script) as llm:
        runtime = LocalProcessRuntime(
            tmp_path / "runs",
            kill_grace=2,
            env={
                "NEXUS_NATS_URL": nats_url,
                "NEXUS_BUDGET_RESERVATIONS": "off",  # no spend service here
                "NEXUS_WORKSPACE_ROOT": str(tmp_path / "workspaces"),
                "NEXUS_LLM_BASE_URL": llm.base_url,
                "NEXUS_HEARTBEAT_INTERVAL": "0.5",
                "OTEL_SDK_DISABLED": "false",
                "OTEL_EXPORTER_OTLP_ENDPOINT": "",  # spans go to the file only
                telemetry.SPANS_FILE_ENV: str(spans_file),
            },
        )
        scheduler = SchedulerApp(
            SchedulerSettings(
                replica_id=f"replica-{uuid.uuid4().hex[:6]}",
                tick_seconds=0.2,
                lease_ttl_seconds=3,
                exit_grace_seconds=5,
                health_port=None,
            ),
            bus_settings=BusSettings(url=nats_url, name="scheduler-trace-test"),
            runtime=runtime,
        )
        await core.start()
        await scheduler.start()
        try:
            await apply_agent(bus, AGENT_YAML)
            await apply_skill(bus, SKILL_MD)
            await eventually(core.catalog_fresh, what="fresh catalog", within=10)
            await eventually(scheduler.leading.is_set, what="leadership", within=10)

            client = telemetry.tracer()
            with client.start_as_current_span(REQUEST_SPAN) as request:
                await bus.publish(
                    subjects.run_event(run_id, "requested"),
                    RunRequested(agent_id="tracer", task_id="T-trace", input="Write hello.txt."),
                )
            trace_id = f"{request.get_span_context().trace_id:032x}"

            async def terminal() -> list[Any]:
                return [d.event async for d in bus.replay(RUNS, run_id=run_id)]

            events = await eventually(
                terminal,
                lambda evs: any(type(e).event_name in ("completed", "failed") for e in evs),
                what="terminal event",
                within=60,
            )
            assert isinstance(events[-1], RunCompleted), [type(e).event_name for e in events]

            async def runner_gone() -> bool:
                return not (await runtime.status(run_id)).live

            await eventually(runner_gone, what="runner exit", within=20)
            # Core and the scheduler have handled the terminal event (their last spans).
            await eventually(
                lambda: _memory_spans(exporter),
                lambda spans: (
                    {
                        _service_of(s)
                        for s in spans
                        if s["attributes"].get("nexus.event") == "completed"
                        and s["attributes"].get("nexus.run_id") == run_id
                    }
                    >= {"core", "scheduler"}
                ),
                what="core and scheduler spans of `completed`",
                within=20,
            )
        finally:
            await scheduler.stop()
            await core.stop()

    spans = _memory_spans(exporter) + _file_spans(spans_file)
    run_spans = [s for s in spans if s["trace_id"] == trace_id]
    by_id = {s["span_id"]: s for s in run_spans}

    # Every span about this run is in the one trace.
    about_run = [s for s in spans if s["attributes"].get("nexus.run_id") == run_id]
    assert about_run
    stray = [
        (s["name"], s["attributes"].get("nexus.event")) for s in about_run if s not in run_spans
    ]
    assert not stray, f"spans of the run outside its trace: {stray}"

    # Connected: one root (the client's request), every other span's parent is in the trace.
    roots = [s for s in run_spans if s["parent_span_id"] is None]
    assert [s["name"] for s in roots] == [REQUEST_SPAN]
    orphans = [s["name"] for s in run_spans if s["parent_span_id"] not in (None, *by_id)]
    assert not orphans, f"spans whose parent is not in the trace: {orphans}"

    # All three services took part.
    services = {_service_of(s) for s in run_spans}
    assert {"core", "scheduler", "runner"} <= services, services
    names = {s["name"] for s in run_spans}
    assert {"core assemble", "scheduler observe", "scheduler dispatch"} <= names, names
    assert f"nexus run {run_id}" in names

    # The runner's root continues the scheduler's dispatch span (TRACEPARENT).
    [root] = [s for s in run_spans if s["name"] == f"nexus run {run_id}"]
    assert by_id[root["parent_span_id"]]["name"] == "scheduler dispatch"
    assert root["service"] == "nexus-runner"
    assert root["attributes"]["nexus.outcome"] == "completed"
    assert root["attributes"]["nexus.agent_id"] == "tracer"
    assert root["attributes"]["nexus.tokens_in"] == 42

    # The scheduler handled `prepared` and published queued/dispatched in the run's trace.
    observed = {
        s["attributes"]["nexus.event"]
        for s in run_spans
        if s["name"] == "scheduler observe" and s["attributes"].get("nexus.run_id") == run_id
    }
    assert {"prepared", "dispatched", "started", "completed"} <= observed, observed

    # One LLM span with model, agent and tokens, child of the run span.
    [chat] = [s for s in run_spans if s["attributes"].get("gen_ai.operation.name") == "chat"]
    assert chat["name"] == "chat fake-model"
    assert chat["kind"] == "CLIENT"
    assert chat["parent_span_id"] == root["span_id"]
    assert {
        "gen_ai.request.model": "fake-model",
        "gen_ai.usage.input_tokens": 42,
        "gen_ai.usage.output_tokens": 7,
        "gen_ai.response.finish_reasons": ["tool_calls"],
        "nexus.agent_id": "tracer",
        "nexus.run_id": run_id,
        "nexus.turn": 1,
    }.items() <= chat["attributes"].items()

    # One span per tool call, with the tool and its outcome.
    tools = [s for s in run_spans if s["attributes"].get("gen_ai.operation.name") == "execute_tool"]
    assert sorted(
        (s["attributes"]["gen_ai.tool.name"], s["attributes"]["nexus.outcome"]) for s in tools
    ) == [
        ("finish", "ok"),
        ("write_file", "ok"),
    ]
    assert all(s["parent_span_id"] == root["span_id"] for s in tools)
    assert all(s["attributes"]["nexus.agent_id"] == "tracer" for s in tools)

    # Core's projections handled the runner's tool events in the same trace.
    core_events = {
        s["attributes"].get("nexus.event") for s in run_spans if _service_of(s) == "core"
    }
    assert {"requested", "prepared", "tool_called", "completed"} <= core_events, core_events
