"""Replays (docs/lab.md): an unchanged agent reproduces its recorded run with no model call;
a changed prompt or skill is reported as the first divergence, then the run stops or goes on
with the live model; a source without a transcript is refused before any model call."""

from __future__ import annotations

from pathlib import Path

from nexus_events.events.lab import RunDiverged
from nexus_events.events.lab_specs import DivergenceKind, OnDivergence
from nexus_events.events.runs import (
    Reason,
    RunCompleted,
    RunConfig,
    RunFailed,
    RunStarted,
    RunTurn,
    SkillDoc,
    ToolCalled,
    ToolResult,
)
from nexus_events.transport.bus import Bus
from tests.fakes.openai_server import FakeOpenAI, Reply, ToolCall

from nexus_runner.app import execute_run
from nexus_runner.config import RunnerSettings

from .conftest import git
from .lab_sources import SKILL, SKILL_SCRIPT, accepting, lab_config, record
from .support import make_config, names, run_events


def _tools(events: list[object]) -> list[tuple[object, ...]]:
    return [
        (e.turn, e.call_id, e.tool, e.arguments)
        if isinstance(e, ToolCalled)
        else (e.turn, e.call_id, e.ok, e.output)
        for e in events
        if isinstance(e, (ToolCalled, ToolResult))
    ]


async def test_an_unchanged_replay_reproduces_the_recording_with_no_model_call(
    bus: Bus, runner_bus: Bus, settings: RunnerSettings, remote: Path
) -> None:
    source = await record(runner_bus, settings, remote)
    async with FakeOpenAI() as llm:
        replay = lab_config(source, llm.base_url, mode="replay")
        terminal = await execute_run(replay, accepting(settings), runner_bus)
        assert llm.requests == []  # zero live model calls
    assert isinstance(terminal, RunCompleted), terminal
    recorded = await run_events(bus, source.run_id)
    replayed = await run_events(bus, replay.run_id)
    assert _tools(replayed) == _tools(recorded)  # same calls, ids, arguments and results
    assert len(_tools(replayed)) == 10
    first = next(e for e in recorded if isinstance(e, RunCompleted))
    assert terminal.reason == Reason.SUCCEEDED
    assert terminal.result.summary == first.result.summary
    assert terminal.result.files_changed == first.result.files_changed
    assert terminal.result.turns == first.result.turns == 4
    turns = [e for e in replayed if isinstance(e, RunTurn)]
    assert [(t.turn, t.replayed, t.tokens_in, t.cost_usd) for t in turns] == [
        (n, True, 0, 0.0) for n in range(1, 5)
    ]
    assert terminal.tokens_in == terminal.tokens_out == 0
    assert "diverged" not in names(replayed)
    # Both started from the same commit, which `started` names.
    bases = [e.base_commit for e in (*recorded, *replayed) if isinstance(e, RunStarted)]
    assert len(bases) == 2
    assert bases[0] == bases[1] == git(remote, "rev-parse", "main").strip()


async def test_a_changed_system_prompt_diverges_at_turn_1_and_stops(
    bus: Bus, runner_bus: Bus, settings: RunnerSettings, remote: Path
) -> None:
    source = await record(runner_bus, settings, remote)
    async with FakeOpenAI() as llm:
        replay = lab_config(source, llm.base_url, mode="replay").model_copy(
            update={"system_prompt": "You are a careful implementer."}
        )
        terminal = await execute_run(replay, accepting(settings), runner_bus)
        assert llm.requests == []
    assert isinstance(terminal, RunCompleted), terminal
    assert terminal.reason == Reason.DIVERGED
    assert "turn 1" in terminal.message
    assert DivergenceKind.SYSTEM_PROMPT in terminal.message
    events = await run_events(bus, replay.run_id)
    diverged = [e for e in events if isinstance(e, RunDiverged)]
    assert len(diverged) == 1
    only = diverged[0]
    assert (only.turn, only.kind, only.index, only.action) == (
        1, DivergenceKind.SYSTEM_PROMPT, 0, OnDivergence.STOP
    )  # fmt: skip
    assert only.recorded.startswith("You are an implementer.")
    assert only.actual.startswith("You are a careful implementer.")
    assert not [e for e in events if isinstance(e, ToolCalled)]  # nothing ran
    assert terminal.result.commit_sha is None


async def test_a_changed_system_prompt_goes_on_live_when_asked(
    bus: Bus, runner_bus: Bus, settings: RunnerSettings, remote: Path
) -> None:
    source = await record(runner_bus, settings, remote)
    live = [
        Reply(tool_calls=(ToolCall("write_file", {"path": "c.txt", "content": "c\n"}),)),
        Reply(tool_calls=(ToolCall("finish", {"summary": "went live"}),)),
    ]
    async with FakeOpenAI(live) as llm:
        replay = lab_config(source, llm.base_url, mode="replay", on_divergence="live")
        replay = replay.model_copy(update={"system_prompt": "You are a careful implementer."})
        terminal = await execute_run(replay, accepting(settings), runner_bus)
        assert len(llm.requests) == 2  # every call from the divergence on is live
    assert isinstance(terminal, RunCompleted), terminal
    assert (terminal.reason, terminal.result.summary) == (Reason.SUCCEEDED, "went live")
    events = await run_events(bus, replay.run_id)
    diverged = [e for e in events if isinstance(e, RunDiverged)]
    assert [(d.turn, d.kind, d.action) for d in diverged] == [
        (1, DivergenceKind.SYSTEM_PROMPT, OnDivergence.LIVE)
    ]
    turns = [e for e in events if isinstance(e, RunTurn)]
    assert [(t.turn, t.replayed) for t in turns] == [(1, False), (2, False)]
    assert terminal.tokens_in == 20


async def test_a_changed_on_demand_skill_diverges_where_the_model_read_it(
    bus: Bus, runner_bus: Bus, settings: RunnerSettings, remote: Path
) -> None:
    source = await record(runner_bus, settings, remote, SKILL_SCRIPT, skills=[SKILL])
    changed = SKILL | {"version": "2", "content": "Write files in upper case."}
    async with FakeOpenAI() as llm:
        replay = lab_config(source, llm.base_url, mode="replay").model_copy(
            update={"skills": [SkillDoc.model_validate(changed)]}
        )
        terminal = await execute_run(replay, accepting(settings), runner_bus)
        assert llm.requests == []
    assert isinstance(terminal, RunCompleted), terminal
    assert terminal.reason == Reason.DIVERGED
    events = await run_events(bus, replay.run_id)
    diverged = [e for e in events if isinstance(e, RunDiverged)]
    assert [(d.turn, d.kind) for d in diverged] == [(3, DivergenceKind.TOOL_RESULT)]
    assert (diverged[0].recorded, diverged[0].actual) == (
        "Write files in lower case.", "Write files in upper case."
    )  # fmt: skip
    turns = [e for e in events if isinstance(e, RunTurn)]
    assert [t.replayed for t in turns] == [True, True]  # turn 3 was never served
    results = [e for e in events if isinstance(e, ToolResult)]
    assert [r.output for r in results if r.tool == "read_skill"] == ["Write files in upper case."]


async def test_a_replay_of_a_run_with_no_transcript_is_refused_before_any_model_call(
    bus: Bus, runner_bus: Bus, settings: RunnerSettings, remote: Path
) -> None:
    async with FakeOpenAI() as llm:
        never = lab_config(lab_config_source(llm.base_url, remote), llm.base_url, mode="replay")
        terminal = await execute_run(never, settings, runner_bus)
        assert llm.requests == []
    assert isinstance(terminal, RunFailed), terminal
    assert terminal.reason == Reason.LAB_SOURCE_UNUSABLE
    source = never.lab.source_run_id if never.lab else ""
    assert terminal.message == (f"the transcript of run {source} has expired or was never written")
    assert names(await run_events(bus, never.run_id)) == ["started", "failed"]


def lab_config_source(base_url: str, remote: Path) -> RunConfig:
    """A source that never ran: no events, no transcript."""
    return make_config(base_url, repo={"url": str(remote)})
