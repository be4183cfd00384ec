"""Typed outputs: finish.details checked against the agent's output_schema, whole runs against
real NATS and the fake model (a misfit is answered and asked again, then invalid_output)."""

from __future__ import annotations

from typing import Any

from nexus_events.events.runs import Reason, RunCompleted, RunFailed, ToolResult
from nexus_events.transport.bus import Bus
from tests.fakes.openai_server import FakeOpenAI, Reply, ToolCall

from nexus_runner.app import execute_run
from nexus_runner.config import RunnerSettings

from .support import make_config, run_events

REVIEW_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["verdict"],
    "properties": {
        "verdict": {"enum": ["approve", "request_changes"]},
        "findings": {"type": "array", "items": {"type": "string"}},
    },
}


def finish(**details: Any) -> Reply:
    return Reply(tool_calls=(ToolCall("finish", {"summary": "reviewed", "details": details}),))


async def _run(
    runner_bus: Bus, settings: RunnerSettings, script: list[Reply], **overrides: Any
) -> tuple[RunCompleted | RunFailed, FakeOpenAI, str]:
    async with FakeOpenAI(script) as llm:
        body: dict[str, Any] = {
            "agent_id": "reviewer",
            "tools": ["read_file", "finish"],
            "output_schema": REVIEW_SCHEMA,
        }
        config = make_config(llm.base_url, **(body | overrides))
        terminal = await execute_run(config, settings, runner_bus)
    assert isinstance(terminal, RunCompleted | RunFailed), terminal
    return terminal, llm, config.run_id


async def test_details_that_fit_at_once_complete_the_run(
    runner_bus: Bus, settings: RunnerSettings
) -> None:
    terminal, llm, _ = await _run(runner_bus, settings, [finish(verdict="approve", findings=[])])
    assert isinstance(terminal, RunCompleted), terminal
    assert terminal.result.details == {"verdict": "approve", "findings": []}
    assert len(llm.requests) == 1


async def test_a_misfit_is_explained_and_the_second_finish_fits(
    bus: Bus, runner_bus: Bus, settings: RunnerSettings
) -> None:
    script = [
        finish(verdict="maybe", findings="none"),
        finish(verdict="request_changes", findings=["add() subtracts"]),
    ]
    terminal, llm, run_id = await _run(runner_bus, settings, script)
    assert isinstance(terminal, RunCompleted), terminal
    assert terminal.result.details["verdict"] == "request_changes"
    assert terminal.result.turns == 2
    # The model was told, as the finish call's result, what is wrong where.
    told = llm.requests[1]["messages"][-1]
    assert told["role"] == "tool"
    text = str(told["content"])
    assert "$.verdict: 'maybe' is not one of ['approve', 'request_changes']" in text
    assert "$.findings: 'none' is not of type 'array'" in text
    assert "1 attempt(s) left" not in text  # default retries: 2
    assert "2 attempt(s) left" in text
    results = [e for e in await run_events(bus, run_id) if isinstance(e, ToolResult)]
    assert [r.ok for r in results] == [False, True]


async def test_details_that_never_fit_fail_the_run_with_the_errors(
    bus: Bus, runner_bus: Bus, settings: RunnerSettings
) -> None:
    # Different each time: the misfits, not the stuck detector, end the run.
    script = [finish(verdict=f"v{i}") for i in range(5)]
    terminal, llm, run_id = await _run(runner_bus, settings, script)
    assert isinstance(terminal, RunFailed), terminal
    assert terminal.reason == Reason.INVALID_OUTPUT
    assert terminal.detail["attempts"] == 3  # the first and NEXUS_OUTPUT_RETRIES=2 more
    assert terminal.detail["errors"] == [
        {"path": "$.verdict", "message": "'v2' is not one of ['approve', 'request_changes']"}
    ]
    assert len(llm.requests) == 3
    results = [e for e in await run_events(bus, run_id) if isinstance(e, ToolResult)]
    assert [r.ok for r in results] == [False, False, False]
    assert "No attempts left" in results[-1].output


async def test_output_retries_setting_and_missing_required_field(
    runner_bus: Bus, settings: RunnerSettings
) -> None:
    no_retry = settings.model_copy(update={"output_retries": 0})
    terminal, llm, _ = await _run(runner_bus, no_retry, [finish(), finish(verdict="approve")])
    assert isinstance(terminal, RunFailed), terminal
    assert terminal.reason == Reason.INVALID_OUTPUT
    assert terminal.detail["errors"] == [
        {"path": "$", "message": "'verdict' is a required property"}
    ]
    assert len(llm.requests) == 1


async def test_misfits_count_against_the_turn_budget(
    runner_bus: Bus, settings: RunnerSettings
) -> None:
    patient = settings.model_copy(update={"output_retries": 5})
    script = [finish(verdict=f"v{i}") for i in range(5)]
    terminal, llm, _ = await _run(runner_bus, patient, script, budgets={"max_turns": 2})
    assert isinstance(terminal, RunFailed), terminal
    assert terminal.reason == Reason.BUDGET_EXCEEDED
    assert terminal.detail["budget"] == "max_turns"
    assert len(llm.requests) == 2


async def test_an_invalid_schema_fails_the_run_before_the_model_is_asked(
    runner_bus: Bus, settings: RunnerSettings
) -> None:
    broken = {"type": "object", "properties": {"verdict": {"type": "verdict"}}}
    terminal, llm, _ = await _run(
        runner_bus, settings, [finish(verdict="approve")], output_schema=broken
    )
    assert isinstance(terminal, RunFailed), terminal
    assert terminal.reason == Reason.INVALID_REQUEST
    assert "output_schema is not a valid JSON Schema" in terminal.message
    assert terminal.detail["output_schema"]["path"] == "$.properties.verdict.type"
    assert llm.requests == []


async def test_without_a_schema_any_details_go(runner_bus: Bus, settings: RunnerSettings) -> None:
    terminal, _, _ = await _run(runner_bus, settings, [finish(verdict=42)], output_schema=None)
    assert isinstance(terminal, RunCompleted), terminal
    assert terminal.result.details == {"verdict": 42}
