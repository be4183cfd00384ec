"""The runner's spans: the run's root continues the caller's trace; LLM and tool call spans."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

from nexus_events.contract import subjects
from nexus_events.contract.streams import RUNS
from nexus_events.events.runs import RunCompleted, RunPrepared
from nexus_events.runtime import telemetry
from nexus_events.transport.bus import Bus
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind
from tests.fakes.openai_server import FakeOpenAI, Reply, ToolCall

from nexus_runner.app import execute_run
from nexus_runner.config import RunnerSettings

from .support import make_config


def _script() -> list[Reply]:
    return [
        Reply(
            tool_calls=(
                ToolCall("read_file", {"path": "../../../etc/passwd"}),  # refused
                ToolCall("read_file", {"path": "missing.txt"}),  # fails
                ToolCall("write_file", {"path": "hello.txt", "content": "hi"}),
            ),
            prompt_tokens=11,
            completion_tokens=3,
        ),
        Reply(tool_calls=(ToolCall("finish", {"summary": "wrote hello"}),), prompt_tokens=20),
    ]


async def _event_trace_ids(bus: Bus, run_id: str) -> set[str | None]:
    return {
        d.envelope.traceparent.split("-")[1] if d.envelope.traceparent else None
        async for d in bus.replay(RUNS, run_id=run_id)
    }


async def test_run_llm_and_tool_spans(
    bus: Bus, runner_bus: Bus, settings: RunnerSettings, exporter: InMemorySpanExporter
) -> None:
    caller = telemetry.tracer().start_span("scheduler dispatch (stand-in)")
    async with FakeOpenAI(_script()) as llm:
        config = make_config(llm.base_url)
        terminal = await execute_run(
            config, settings, runner_bus, trace_context=trace.set_span_in_context(caller)
        )
    caller.end()
    assert isinstance(terminal, RunCompleted)
    trace_id = caller.get_span_context().trace_id
    spans = exporter.get_finished_spans()
    of_run = [s for s in spans if (s.attributes or {}).get("nexus.run_id") == config.run_id]
    assert {s.context.trace_id for s in of_run} == {trace_id}

    [root] = [s for s in spans if s.name == f"nexus run {config.run_id}"]
    assert root.context.trace_id == trace_id
    assert root.parent is not None
    assert root.parent.span_id == caller.get_span_context().span_id
    root_attrs = dict(root.attributes or {})
    assert root_attrs["nexus.outcome"] == "completed"
    assert root_attrs["nexus.tokens_in"] == 31
    assert root_attrs["gen_ai.request.model"] == "gpt-4o-mini"

    chats = [s for s in spans if s.name == "chat gpt-4o-mini"]
    assert [dict(s.attributes or {})["nexus.turn"] for s in chats] == [1, 2]
    first = dict(chats[0].attributes or {})
    assert first["gen_ai.usage.input_tokens"] == 11
    assert first["gen_ai.usage.output_tokens"] == 3
    assert first["gen_ai.response.model"] == "gpt-4o-mini"
    assert first["gen_ai.response.finish_reasons"] == ("tool_calls",)
    assert first["nexus.agent_id"] == "implementer"
    assert all(s.kind is SpanKind.CLIENT for s in chats)

    tools = [
        s for s in spans if (s.attributes or {}).get("gen_ai.operation.name") == "execute_tool"
    ]
    outcomes = [
        (dict(s.attributes or {})["gen_ai.tool.name"], dict(s.attributes or {})["nexus.outcome"])
        for s in sorted(tools, key=lambda s: s.start_time or 0)
    ]
    assert outcomes == [
        ("read_file", "refused"),
        ("read_file", "error"),
        ("write_file", "ok"),
        ("finish", "ok"),
    ]
    for span in [*chats, *tools]:
        assert span.parent is not None
        assert span.parent.span_id == root.context.span_id

    # Every event the run published is in the caller's trace.
    assert await _event_trace_ids(bus, config.run_id) == {f"{trace_id:032x}"}


async def _run_cli(args: list[str], env: dict[str, str]) -> int:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "nexus_runner", *args, env=env
    )
    return await asyncio.wait_for(proc.wait(), 60)


def _cli_env(nats_url: str, tmp_path: Path, spans: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("TRACEPARENT", "TRACESTATE")}
    env.update(
        {
            "NEXUS_NATS_URL": nats_url,
            "NEXUS_BUDGET_RESERVATIONS": "off",  # no spend service here
            "NEXUS_WORKSPACE_ROOT": str(tmp_path / "runs"),
            "NEXUS_HEARTBEAT_INTERVAL": "0.5",
            "OTEL_SDK_DISABLED": "false",
            "OTEL_EXPORTER_OTLP_ENDPOINT": "",
            telemetry.SPANS_FILE_ENV: str(spans),
        }
    )
    return env


def _file_spans(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


async def test_cli_continues_the_prepared_events_trace_and_flushes_at_exit(
    bus: Bus, nats_url: str, tmp_path: Path
) -> None:
    publisher = TracerProvider().get_tracer("core stand-in")
    spans_file = tmp_path / "spans.jsonl"
    script = [Reply(tool_calls=(ToolCall("finish", {"summary": "done"}),))]
    async with FakeOpenAI(script) as llm:
        config = make_config(llm.base_url)
        with publisher.start_as_current_span("core assemble") as prepare:
            await bus.publish(
                subjects.run_event(config.run_id, "prepared"), RunPrepared(config=config)
            )
        code = await _run_cli(["--run-id", config.run_id], _cli_env(nats_url, tmp_path, spans_file))
    assert code == 0
    ctx = prepare.get_span_context()
    spans = _file_spans(spans_file)  # written before the process exited
    [root] = [s for s in spans if s["name"] == f"nexus run {config.run_id}"]
    assert root["trace_id"] == f"{ctx.trace_id:032x}"
    assert root["parent_span_id"] == f"{ctx.span_id:016x}"
    assert root["service"] == "nexus-runner"
    of_run = [s for s in spans if s["attributes"].get("nexus.run_id") == config.run_id]
    assert {s["trace_id"] for s in of_run} == {root["trace_id"]}
    assert {"chat gpt-4o-mini", "execute_tool finish"} <= {s["name"] for s in spans}
    assert await _event_trace_ids(bus, config.run_id) == {root["trace_id"]}


async def test_cli_continues_traceparent_from_the_environment(
    bus: Bus, nats_url: str, tmp_path: Path
) -> None:
    spans_file = tmp_path / "spans.jsonl"
    traceparent = "00-" + "ab" * 16 + "-" + "cd" * 8 + "-01"
    script = [Reply(tool_calls=(ToolCall("finish", {"summary": "done"}),))]
    async with FakeOpenAI(script) as llm:
        config = make_config(llm.base_url)
        path = tmp_path / "run.json"
        path.write_text(config.model_dump_json())
        env = {**_cli_env(nats_url, tmp_path, spans_file), "TRACEPARENT": traceparent}
        code = await _run_cli(["--config", str(path)], env)
    assert code == 0
    [root] = [s for s in _file_spans(spans_file) if s["name"] == f"nexus run {config.run_id}"]
    assert root["trace_id"] == "ab" * 16
    assert root["parent_span_id"] == "cd" * 8
    assert await _event_trace_ids(bus, config.run_id) == {"ab" * 16}
