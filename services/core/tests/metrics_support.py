"""Helpers shared by the metrics tests: run events to feed, and reading an InMemoryMetricReader."""

from __future__ import annotations

from typing import Any

from nexus_events.events.runs import (
    RunCompleted,
    RunConfig,
    RunDispatched,
    RunFailed,
    RunPrepared,
    RunRequested,
    RunStarted,
    RunTurn,
    ToolCalled,
    ToolResult,
)
from nexus_events.events.specs import ModelSpec
from opentelemetry.sdk.metrics.export import InMemoryMetricReader


def lifecycle(agent: str = "implementer", model: str = "gpt-4o-mini") -> list[tuple[str, Any]]:
    """(event name, event) of one successful run with two turns and three tool calls."""
    return [
        ("requested", RunRequested(agent_id=agent, input="fix it")),
        (
            "prepared",
            RunPrepared(
                config=RunConfig(
                    run_id="r", agent_id=agent, system_prompt="be good", model=ModelSpec(name=model)
                )
            ),
        ),
        ("dispatched", RunDispatched(runtime="local", handle="123")),
        ("started", RunStarted(runner="host")),
        ("turn", RunTurn(turn=1, model=model, tokens_in=100, tokens_out=20, cost_usd=0.25)),
        ("tool_called", ToolCalled(turn=1, call_id="c1", tool="read_file")),
        (
            "tool_result",
            ToolResult(turn=1, call_id="c1", tool="read_file", ok=True, duration_ms=30),
        ),
        ("tool_called", ToolCalled(turn=1, call_id="c2", tool="run_shell")),
        ("tool_result", ToolResult(turn=1, call_id="c2", tool="run_shell", ok=False)),
        ("tool_called", ToolCalled(turn=1, call_id="c3", tool="run_shell", refused=True)),
        ("tool_result", ToolResult(turn=1, call_id="c3", tool="run_shell", ok=False)),
        ("turn", RunTurn(turn=2, model=model, tokens_in=50, tokens_out=10, cost_usd=0.5)),
        ("completed", RunCompleted(tokens_in=150, tokens_out=30, cost_usd=0.75)),
    ]


def failed_run(agent: str = "reviewer") -> list[tuple[str, Any]]:
    return [
        ("requested", RunRequested(agent_id=agent)),
        ("failed", RunFailed(reason="unknown_agent", message="no such agent")),
    ]


def points(reader: InMemoryMetricReader) -> dict[str, list[Any]]:
    """Every data point by metric name, from one collection."""
    data = reader.get_metrics_data()
    out: dict[str, list[Any]] = {}
    if data is None:
        return out
    for rm in data.resource_metrics:
        for sm in rm.scope_metrics:
            for metric in sm.metrics:
                out.setdefault(metric.name, []).extend(metric.data.data_points)
    return out


def value(pts: dict[str, list[Any]], name: str, **attrs: str) -> float:
    """Sum of the counter points of `name` whose attributes include `attrs`."""
    return sum(
        p.value
        for p in pts.get(name, [])
        if all(p.attributes.get(k) == v for k, v in attrs.items())
    )


def hist_count(pts: dict[str, list[Any]], name: str, **attrs: str) -> int:
    return sum(
        p.count
        for p in pts.get(name, [])
        if all(p.attributes.get(k) == v for k, v in attrs.items())
    )
