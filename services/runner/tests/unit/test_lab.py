"""The lab's pure decisions: normalising a request, classifying a divergence, folding a
source's transcript into recorded calls, and where a fork starts."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from nexus_events.events.lab import DIVERGENCE_EXCERPT
from nexus_events.events.lab_specs import DivergenceKind, OnDivergence
from nexus_events.events.runs import (
    Condensation,
    Reason,
    RunCheckpointed,
    RunConfig,
    SkillDoc,
    ToolCalled,
)
from nexus_events.events.specs import Permissions, ToolGrant
from nexus_events.events.transcripts import TranscriptEntry

from nexus_runner.errors import RunStopped
from nexus_runner.git import Author, Git
from nexus_runner.lab.divergence import (
    Divergence,
    config_divergence,
    message_divergence,
    recording_ended,
)
from nexus_runner.lab.forking import fork_checkpoint, fork_messages
from nexus_runner.lab.normalising import Normaliser
from nexus_runner.lab.recording import SourceRun, recorded_calls
from nexus_runner.lab.replaying import served
from nexus_runner.plan import READ_SKILL
from nexus_runner.prompt import initial_messages, without_skills
from nexus_runner.tools import ToolContext, ToolRegistry
from nexus_runner.transcript import kept_entries
from nexus_runner.workspace import Workspace

NORM = Normaliser("run-new", "run-old", "/srv/runs/run-new")


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def assistant(*calls: str, text: str | None = None) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": text}
    if calls:
        message["tool_calls"] = [
            {"id": c, "type": "function", "function": {"name": "write_file", "arguments": "{}"}}
            for c in calls
        ]
    return message


def tool(call_id: str, text: str = "ok") -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call_id, "content": text}


def entries(*messages: dict[str, Any], attempt: int = 1, start: int = 0) -> list[TranscriptEntry]:
    return [
        TranscriptEntry(attempt=attempt, index=start + i, op="message", message=m)
        for i, m in enumerate(messages)
    ]


# -- normalising -----------------------------------------------------------------------------


def test_ids_times_paths_and_branches_of_either_run_read_the_same() -> None:
    old = "on nexus/run-old at 2026-11-20T08:00:01.5Z in /var/lib/nexus/run-old/src"
    new = "on nexus/run-new at 2026-11-28 10:22:16+00:00 in /srv/runs/run-new/src"
    assert NORM.text(old) == NORM.text(new) == "on nexus/<run> at <time> in <workspace>/src"
    assert NORM.value({"a": [old], "n": 3}) == {"a": [NORM.text(new)], "n": 3}
    # What really differs still differs: another run's id, another file.
    assert NORM.text("run-other") != NORM.text("run-old")
    assert NORM.text("/srv/runs/run-new/a.py") != NORM.text("/srv/runs/run-new/b.py")
    assert NORM.text("run-older") == "<run>er"  # a token is replaced where it appears


# -- divergence ------------------------------------------------------------------------------


def config(**changes: Any) -> RunConfig:
    body: dict[str, Any] = {
        "run_id": "run-new",
        "agent_id": "implementer",
        "system_prompt": "You implement.",
        "model": {"name": "m", "temperature": 0.2},
        "tools": ["read_file", "finish"],
    }
    return RunConfig.model_validate(body | changes)


def system(cfg: RunConfig) -> dict[str, Any]:
    return initial_messages(cfg, "You work on branch nexus/run-new.")[0]


def test_the_model_or_the_tools_differ_at_turn_1() -> None:
    assert config_divergence(config(), config()) is None
    assert config_divergence(None, config(tools=["finish"])) is None  # source config unknown
    model = config_divergence(config(), config(model={"name": "m", "temperature": 0.7}))
    assert model is not None
    assert model.kind is DivergenceKind.MODEL
    assert "temperature 0.7" in model.detail
    tools = config_divergence(config(), config(tools=["read_file", "run_shell", "finish"]))
    assert tools is not None
    assert (tools.kind, tools.detail) == (DivergenceKind.TOOLS, "the tool grants offered differ")
    assert "run_shell" in tools.actual


def test_a_system_message_differs_as_its_prompt_or_only_as_its_skills() -> None:
    skill = SkillDoc(name="s", version="1", content="Be brief.")
    with_skill = config(skills=[skill])
    changed_skill = config(skills=[skill.model_copy(update={"content": "Be long."})])
    found = message_divergence([system(with_skill)], [system(changed_skill)], NORM)
    assert found is not None
    assert (found.kind, found.index) == (DivergenceKind.SKILLS, 0)
    # The excerpts are the normalised sides.
    assert found.recorded == NORM.text(system(with_skill)["content"])
    assert found.actual.endswith(NORM.text(system(changed_skill)["content"])[-100:])
    assert "Be long." in found.actual
    prompt = config(system_prompt="You review.", skills=[skill])
    found = message_divergence([system(with_skill)], [system(prompt)], NORM)
    assert found is not None
    assert found.kind is DivergenceKind.SYSTEM_PROMPT
    # A skill made on demand is a skills difference too; the rules part is not.
    listed = config(skills=[skill.model_copy(update={"on_demand": True, "description": "d"})])
    assert without_skills(system(listed)["content"]) == without_skills(system(config())["content"])
    assert message_divergence([system(with_skill)], [system(listed)], NORM).kind is (  # type: ignore[union-attr]
        DivergenceKind.SKILLS
    )


def test_other_messages_differ_as_tool_results_or_messages() -> None:
    base = [system(config()), user("task"), assistant("c1"), tool("c1", "wrote 3 bytes")]
    assert message_divergence(base, [dict(m) for m in base], NORM) is None
    result = message_divergence(base, [*base[:3], tool("c1", "wrote 4 bytes")], NORM)
    assert result is not None
    assert (result.kind, result.index) == (DivergenceKind.TOOL_RESULT, 3)
    assert (result.recorded, result.actual) == ("wrote 3 bytes", "wrote 4 bytes")
    task = message_divergence(base, [base[0], user("another task"), *base[2:]], NORM)
    assert task is not None
    assert (task.kind, task.index) == (DivergenceKind.MESSAGE, 1)
    # An inbox message the recording did not have: one more message at the end.
    extra = message_divergence(base, [*base, user("[message from ann] hi")], NORM)
    assert extra is not None
    assert (extra.kind, extra.index) == (DivergenceKind.MESSAGE, 4)
    assert extra.detail == "the replay has one more user message at index 4"
    # The same content, other tool calls: both whole messages are shown.
    calls = message_divergence(base, [*base[:2], assistant("c2"), *base[3:]], NORM)
    assert calls is not None
    assert calls.kind is DivergenceKind.MESSAGE
    assert '"c1"' in calls.recorded
    assert '"c2"' in calls.actual


def test_a_turn_past_the_recording_and_the_event_s_excerpts() -> None:
    ended = recording_ended(5, 4)
    assert ended.kind is DivergenceKind.RECORDING_ENDED
    assert ended.detail == "the replay asks turn 5; the recording ends at turn 4"
    big = Divergence(DivergenceKind.MESSAGE, "d", 1, "x" * 5000, "y" * 5000)
    event = big.event(3, OnDivergence.LIVE)
    assert (event.turn, event.index, event.action) == (3, 1, OnDivergence.LIVE)
    assert len(event.recorded) == len(event.actual) == DIVERGENCE_EXCERPT


# -- recording -------------------------------------------------------------------------------


def test_recorded_calls_follow_a_resumed_source_and_its_condensations() -> None:
    first = entries(system(config()), user("task"), assistant("c1"), tool("c1"), assistant("c2"))
    # Attempt 2 resumed from entry 4: attempt 1's second reply is void, its own counts.
    second = [
        *entries(assistant("c3"), tool("c3"), attempt=2, start=4),
        TranscriptEntry(
            attempt=2,
            index=6,
            op="condense",
            condensation=Condensation(strategy="elide", elided=[3], placeholder="[cut]"),
        ),
        *entries(assistant(text="done"), attempt=2, start=7),
    ]
    kept = kept_entries([*first, *second], {2: 4})
    calls = recorded_calls(kept)
    assert [c.turn for c in calls] == [1, 2, 3]
    assert [len(c.request) for c in calls] == [2, 4, 6]
    assert calls[1].reply["tool_calls"][0]["id"] == "c3"  # not the void c2
    assert calls[2].request[3]["content"] == "[cut]"  # the condensation applied before call 3
    assert calls[2].reply["content"] == "done"


def test_a_recorded_reply_is_served_as_it_was_with_no_usage() -> None:
    reply = assistant("c1", text="writing")
    [call] = recorded_calls(entries(user("task"), reply))
    completion = served(call)
    assert completion.assistant_message() == reply  # the next request is the same bytes
    assert (completion.replayed, completion.tokens_in, completion.tokens_out) == (True, 0, 0)
    assert completion.finish_reason == "tool_calls"


# -- forks -----------------------------------------------------------------------------------


def source(*checkpoints: int, writes: tuple[tuple[int, str], ...] = ()) -> SourceRun:
    run = SourceRun("run-old")
    run.entries = entries(
        system(config()), user("task"),
        assistant("c1"), tool("c1"),  # turn 1
        user("[message from ann] more"), assistant("c2", "c3"), tool("c2"), tool("c3"),  # 2
        user("Continue with the task"), assistant(text="done"),  # 3
    )  # fmt: skip
    run.calls = recorded_calls(run.entries)
    run.checkpoints = [
        RunCheckpointed(turn=t, commit=f"c{t}", object=f"run-old/1-{t}", digest="d", size=1)
        for t in checkpoints
    ]
    run.called = [ToolCalled(turn=t, call_id=f"x{t}", tool=name) for t, name in writes]
    return run


def test_a_fork_keeps_the_conversation_to_the_end_of_its_turn() -> None:
    run = source()
    assert [m.get("tool_call_id") or m["role"] for m in fork_messages(run, 1)] == [
        "system", "user", "assistant", "c1",
    ]  # fmt: skip
    at_two = fork_messages(run, 2)
    assert [m.get("tool_call_id") or m["role"] for m in at_two][-4:] == [
        "user", "assistant", "c2", "c3",
    ]  # fmt: skip
    assert len(fork_messages(run, 3)) == 10
    with pytest.raises(RunStopped) as past:
        fork_messages(run, 4)
    assert past.value.reason == Reason.LAB_SOURCE_UNUSABLE
    assert past.value.message == "run run-old has 3 turns: there is no turn 4 to fork at"


def test_a_fork_restores_the_last_checkpoint_by_its_turn_or_refuses() -> None:
    assert fork_checkpoint(source(1, 2), 1).commit == "c1"  # type: ignore[union-attr]
    assert fork_checkpoint(source(1, 2), 3).commit == "c2"  # type: ignore[union-attr]
    # Nothing written by then: the base commit is the workspace.
    assert fork_checkpoint(source(writes=((1, "read_file"), (2, "finish"))), 2) is None
    assert fork_checkpoint(source(2, writes=((2, "write_file"),)), 1) is None
    with pytest.raises(RunStopped) as refused:
        fork_checkpoint(source(3, writes=((2, "run_shell"),)), 2)
    assert refused.value.reason == Reason.LAB_SOURCE_UNUSABLE
    assert refused.value.message == "run run-old has no checkpoint at or before turn 2"


# -- on-demand skills ------------------------------------------------------------------------


def test_on_demand_skills_are_listed_by_name_and_description_only() -> None:
    loaded = SkillDoc(name="style", version="3", content="Lower case only.")
    listed = loaded.model_copy(update={"on_demand": True, "description": "How to write."})
    text = system(config(skills=[listed]))["content"]
    assert "- style: How to write." in text
    assert "Lower case only." not in text
    assert "v3" not in text  # a new version changes nothing the model is sent until it reads
    assert "## Skill: style (v3)\nLower case only." in system(config(skills=[loaded]))["content"]


async def test_read_skill_is_offered_with_on_demand_skills_and_reads_only_them(
    tmp_path: Path,
) -> None:
    ws = Workspace(tmp_path)
    ctx = ToolContext(
        workspace=ws,
        git=Git(ws.root, Author("a", "a@x")),
        shell_timeout=10,
        output_cap=1000,
        skills={"style": "Lower case only."},
    )
    registry = ToolRegistry([ToolGrant(name="finish")], Permissions(), ctx)
    assert READ_SKILL in [s["function"]["name"] for s in registry.specs()]
    assert READ_SKILL in [s["function"]["name"] for s in registry.specs(read_only=True)]
    read = await registry.execute(registry.decide(READ_SKILL, json.dumps({"name": "style"})))
    assert (read.ok, read.output) == (True, "Lower case only.")
    unknown = await registry.execute(registry.decide(READ_SKILL, json.dumps({"name": "a.md"})))
    assert not unknown.ok
    assert unknown.output == "no on-demand skill named 'a.md'; this run's: style"
    plain = ToolRegistry([ToolGrant(name="finish")], Permissions(), replace(ctx, skills={}))
    assert READ_SKILL not in [s["function"]["name"] for s in plain.specs()]
