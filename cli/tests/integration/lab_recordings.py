"""Recorded runs for the lab commands' tests: a run's events published on real NATS, as a
runner would, for a real core to project."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from nexus_events.contract import subjects
from nexus_events.contract.runstate import RunStatus
from nexus_events.contract.streams import RUNS
from nexus_events.events import (
    Origin,
    RunCompleted,
    RunRequested,
    RunStarted,
    RunTurn,
    TerminalEvent,
    ToolCalled,
    ToolResult,
    TranscriptEntry,
)
from nexus_events.transport.bus import Bus
from nexus_events.transport.catalog_commands import apply_agent
from nexus_testing import eventually

AGENT_ID = "labbot"
AGENT = f"id: {AGENT_ID}\nrole: devops\nmodel: {{name: test-model}}\nsystem_prompt: You test.\n"


@dataclass(frozen=True)
class Step:
    """One tool call of a recorded turn and what it returned."""

    tool: str
    arguments: dict[str, Any] = field(default_factory=dict)
    output: str = "ok"
    ok: bool = True


async def apply_lab_agent(bus: Bus, fresh: Any) -> None:
    await apply_agent(bus, AGENT)
    await eventually(fresh, what="catalog applied")


async def record_run(
    bus: Bus,
    run_id: str,
    turns: list[list[Step]],
    end: TerminalEvent | None = None,
    *,
    input_text: str = "do the thing",
    tokens: int = 10,
) -> None:
    """Publish a run's events: requested, started, each turn and its calls, then `end`
    (completed by default; None after `turns` leaves the run going) and one transcript entry."""
    request = RunRequested(
        agent_id=AGENT_ID, input=input_text, origin=Origin.CLI, requested_by="someone"
    )
    await bus.publish(subjects.run_event(run_id, RunRequested), request)
    await bus.publish(subjects.run_event(run_id, RunStarted), RunStarted(base_commit="abc123"))
    await bus.publish(
        subjects.run_transcript(run_id),
        TranscriptEntry(attempt=1, index=0, op="message", message={"role": "system"}),
    )
    for number, steps in enumerate(turns, start=1):
        await bus.publish(
            subjects.run_event(run_id, RunTurn),
            RunTurn(turn=number, tokens_in=tokens, tokens_out=tokens // 2, cost_usd=0.001),
        )
        for i, step in enumerate(steps):
            call = f"call_{number}_{i}"
            await bus.publish(
                subjects.run_event(run_id, ToolCalled),
                ToolCalled(turn=number, call_id=call, tool=step.tool, arguments=step.arguments),
            )
            await bus.publish(
                subjects.run_event(run_id, ToolResult),
                ToolResult(
                    turn=number, call_id=call, tool=step.tool, ok=step.ok, output=step.output
                ),
            )
    if end is not None:
        await bus.publish(subjects.run_event(run_id, type(end)), end)


def completed(turns: int, tokens: int = 10) -> RunCompleted:
    return RunCompleted(
        tokens_in=turns * tokens, tokens_out=turns * (tokens // 2), cost_usd=0.001 * turns
    )


async def get_run(bus: Bus, run_id: str) -> dict[str, Any]:
    reply = await bus.nc.request(
        subjects.CORE_RUNS_GET, json.dumps({"run_id": run_id}).encode(), timeout=5
    )
    data: dict[str, Any] = json.loads(reply.data)
    return data


async def projected(bus: Bus, run_id: str, status: RunStatus, turns: int) -> None:
    """Wait until core shows the run in `status` with `turns` turns."""

    async def ready() -> bool:
        row = await get_run(bus, run_id)
        return bool(row.get("status") == status and row.get("turns") == turns)

    await eventually(ready, what=f"{run_id} projected {status} with {turns} turns")


async def requests_of(bus: Bus) -> list[tuple[str, RunRequested]]:
    """Every run request stored, with its run id, in order."""
    found = []
    async for d in bus.replay(RUNS, filter_subject=subjects.run_events_filter(None, RunRequested)):
        assert isinstance(d.event, RunRequested)
        found.append((str(d.address.run_id), d.event))
    return found
