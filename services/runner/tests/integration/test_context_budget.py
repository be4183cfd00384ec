"""Issue 24's context acceptance: a scripted run of 200 turns with 20 KB tool outputs never
sends the model more than its context budget, completes, and its `condensed` events replayed
over the transcript's messages give the very messages the model was sent."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from nexus_events.events.runs import Condensation, RunCompleted, RunCondensed, RunTurn
from nexus_events.transport.bus import Bus
from tests.fakes.openai_server import FakeOpenAI, Reply, ToolCall

from nexus_runner.app import execute_run
from nexus_runner.config import RunnerSettings
from nexus_runner.context import context_budget
from nexus_runner.tokens import counter_for
from nexus_runner.transcript import read_entries

from .support import make_config, run_events

TURNS = 200
LINES = 3_800  # `seq` of 3,800 numbers: about 20 KB of output, different every turn


def _script() -> Any:
    """The model: `seq` in the shell for 200 turns, then `finish`; a summary request (no
    tools offered) gets a summary. A function of the request, since summaries come in between."""
    turns = 0

    def step(body: dict[str, Any]) -> Reply:
        nonlocal turns
        if not body.get("tools"):
            return Reply(text=f"Ran seq {turns} times; every output was a list of numbers.")
        turns += 1
        if turns > TURNS:
            return Reply(tool_calls=(ToolCall("finish", {"summary": "counted"}),))
        first = turns * 10
        command = f"seq {first} {first + LINES - 1}"
        # Some reasoning with each call, as models write: what elision leaves of a turn.
        text = f"Turn {turns}: " + " ".join(f"note{turns}-{i} about the numbers" for i in range(40))
        call = ToolCall("run_shell", {"command": command}, id=f"c{turns}")
        return Reply(text=text, tool_calls=(call,), chunk_size=4_096)

    return step


async def test_200_turns_of_20_kb_outputs_stay_within_the_budget_and_replay_exactly(
    bus: Bus, runner_bus: Bus, settings: RunnerSettings, tmp_path: Path
) -> None:
    async with FakeOpenAI([]) as llm:
        llm.add(*([_script()] * (TURNS * 2)))
        config = make_config(
            llm.base_url,
            model={
                "name": "offline-context-test",  # unknown: the estimate counts
                "base_url": llm.base_url,
                "context_tokens": 100_000,
                "max_output_tokens": 1_000,
            },
            budgets={"max_turns": TURNS + 10, "max_tokens": 10_000_000, "max_cost_usd": 100},
        )
        run_settings = settings.model_copy(update={"acceptance_command": "true"})
        terminal = await execute_run(config, run_settings, runner_bus)
    assert isinstance(terminal, RunCompleted), terminal

    budget = context_budget(config.model, run_settings)
    counter = counter_for(config.model.name)
    calls = [r for r in llm.requests if r.get("tools")]
    assert len(calls) == TURNS + 1
    sizes = [counter.count(r["messages"], r["tools"]) for r in calls]
    assert max(sizes) <= budget, (max(sizes), budget)
    # Without condensing, the last call would have carried all 200 outputs.
    assert len(calls[-1]["messages"]) < TURNS

    events = await run_events(bus, config.run_id)
    condensed = [e for e in events if isinstance(e, RunCondensed)]
    strategies = {e.condensation.strategy for e in condensed}
    summaries = sum(e.condensation.strategy == "summarise" for e in condensed)
    print(
        f"{len(calls)} calls, largest {max(sizes)} of {budget} tokens;"
        f" {len(condensed)} condensations ({summaries} summaries)"
    )
    assert strategies == {"elide", "summarise"}, strategies
    assert all(e.tokens_after <= e.budget == budget for e in condensed)
    assert sum(isinstance(e, RunTurn) for e in events) == TURNS + 1

    # Replay: the transcript's messages, condensed by the *events* in order, give each call's
    # messages exactly (the transcript's own condense entries must say the same).
    pending: list[Condensation] = [e.condensation for e in condensed]
    messages: list[dict[str, Any]] = []
    sent = iter(json.dumps(c["messages"]) for c in calls)
    matched = 0
    expected = next(sent)
    for entry in await read_entries(runner_bus, config.run_id):
        if entry.op == "condense":
            from_event = pending.pop(0)
            assert entry.condensation == from_event
            messages = from_event.apply(messages)
            continue
        assert entry.message is not None
        if json.dumps(messages) == expected:  # the call went out before this message
            matched += 1
            expected = next(sent, "")
        messages.append(entry.message)
    assert not pending
    assert matched == len(calls)
