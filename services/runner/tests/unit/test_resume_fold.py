"""The transcript fold and the resume decisions: pure logic, no bus."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from nexus_events.contract.codec import Envelope
from nexus_events.events.runs import (
    ApprovalDecided,
    ApprovalRequested,
    Condensation,
    RunCompleted,
    RunResult,
    RunTurn,
    ToolCalled,
    ToolResult,
)
from nexus_events.events.transcripts import TranscriptEntry

from nexus_runner.resume import History, PendingCall, interrupted_note, pending_calls
from nexus_runner.tools.registry import IDEMPOTENT_TOOLS
from nexus_runner.transcript import ResumeFailedError, fold


def msg(attempt: int, index: int, text: str, inbox_seq: int | None = None) -> TranscriptEntry:
    return TranscriptEntry(
        attempt=attempt,
        index=index,
        op="message",
        message={"role": "user", "content": text},
        inbox_seq=inbox_seq,
    )


def texts(messages: list[dict[str, Any]]) -> list[str]:
    return [m["content"] for m in messages]


def test_fold_keeps_each_attempts_entries_within_its_range() -> None:
    entries = [
        msg(1, 0, "a"), msg(1, 1, "b"), msg(1, 2, "c"),
        # attempt 1 lived on after attempt 2 resumed from 2: its entry 3 is void
        msg(2, 2, "C"), msg(1, 3, "stale"), msg(2, 3, "D"), msg(2, 4, "E"),
        # attempt 3 resumed from 4: attempt 2's entry 4 is void
        msg(3, 4, "F", inbox_seq=9),
    ]  # fmt: skip
    folded = fold(entries, {2: 2, 3: 4})
    assert texts(folded.messages) == ["a", "b", "C", "D", "F"]
    assert folded.entries == 5
    assert folded.injected == {9}


def test_a_fresh_restart_voids_everything_before_it() -> None:
    folded = fold([msg(1, 0, "a"), msg(1, 1, "b"), msg(2, 0, "x")], {2: 0})
    assert texts(folded.messages) == ["x"]


def test_a_gap_is_corruption() -> None:
    with pytest.raises(ResumeFailedError, match="gap at entry 1"):
        fold([msg(1, 0, "a"), msg(1, 2, "c")], {})


def test_the_resumed_point_past_the_entries_is_a_gap() -> None:
    # attempt 2 says it resumed from 3 but attempt 1's entry 2 was never stored
    with pytest.raises(ResumeFailedError, match="gap at entry 2"):
        fold([msg(1, 0, "a"), msg(1, 1, "b"), msg(2, 3, "d")], {2: 3})


def test_an_entry_of_an_attempt_that_never_resumed_is_corruption() -> None:
    with pytest.raises(ResumeFailedError, match="never resumed"):
        fold([msg(1, 0, "a"), msg(2, 1, "b")], {})


def test_two_different_entries_at_one_index_are_corruption_a_resend_is_not() -> None:
    assert texts(fold([msg(1, 0, "a"), msg(1, 0, "a")], {}).messages) == ["a"]
    with pytest.raises(ResumeFailedError, match="two different"):
        fold([msg(1, 0, "a"), msg(1, 0, "b")], {})


def test_condensations_are_folded_and_must_fit() -> None:
    elide = Condensation(strategy="elide", elided=[1], placeholder="[{chars} chars elided]")
    entries = [
        msg(1, 0, "a"), msg(1, 1, "bbbb"), msg(1, 2, "c"),
        TranscriptEntry(attempt=1, index=3, op="condense", condensation=elide),
        msg(1, 4, "d"),
    ]  # fmt: skip
    assert texts(fold(entries, {}).messages) == ["a", "[4 chars elided]", "c", "d"]
    summarise = Condensation(strategy="summarise", start=1, end=9, summary="s")
    bad = [
        msg(1, 0, "a"),
        TranscriptEntry(attempt=1, index=1, op="condense", condensation=summarise),
    ]
    with pytest.raises(ResumeFailedError, match="entry 1"):
        fold(bad, {})


def assistant(*calls: tuple[str, str]) -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": cid, "type": "function", "function": {"name": name, "arguments": "{}"}}
            for cid, name in calls
        ],
    }


def result(call_id: str, tool: str) -> ToolResult:
    return ToolResult(turn=2, call_id=call_id, tool=tool, ok=True, output="out", duration_ms=1)


def test_pending_calls_rerun_only_what_is_idempotent() -> None:
    messages = [
        {"role": "user", "content": "task"},
        assistant(
            ("c1", "read_file"), ("c2", "write_file"), ("c3", "run_shell"), ("c4", "git_diff")
        ),
        {"role": "tool", "tool_call_id": "c1", "content": "x"},
    ]
    pending = pending_calls(
        messages, IDEMPOTENT_TOOLS.__contains__, {"c3": result("c3", "run_shell")}
    )
    assert [(p.call.id, p.rerun) for p in pending] == [("c2", True), ("c3", False), ("c4", True)]
    assert pending[1].result is not None
    # c2 may have been running; c3 has an outcome recorded; c4 never started
    assert [p.maybe_started for p in pending] == [True, True, False]
    assert "succeeded" in interrupted_note(pending[1])
    later = PendingCall(pending[2].call, rerun=False, maybe_started=False)
    assert "had no effect" in interrupted_note(later)
    assert pending_calls(messages[:1], IDEMPOTENT_TOOLS.__contains__, {}) == []


def test_idempotent_tools_are_reads_writes_and_finish_never_commands() -> None:
    assert {"read_file", "write_file", "edit_file", "finish"} <= IDEMPOTENT_TOOLS
    assert not {"run_shell", "run_tests", "git_commit", "delegate", "remember"} & IDEMPOTENT_TOOLS


def test_interrupted_note_says_the_effect_is_unknown_or_what_was_recorded() -> None:
    call = pending_calls([assistant(("c3", "run_shell"))], lambda _: False, {})[0]
    assert "effect is unknown" in interrupted_note(call)
    assert "restored to the last checkpoint" in interrupted_note(call)
    done = PendingCall(call.call, rerun=False, result=result("c3", "run_shell"))
    assert "succeeded" in interrupted_note(done)
    assert '"out"' in interrupted_note(done)


def env(source: str = "runner", ns: int = 1) -> Envelope:
    return Envelope(subject="s", event_id="e", schema="x", source=source, timestamp_ns=ns)


def test_history_sums_usage_finds_the_plan_approval_and_the_open_calls() -> None:
    history = History()
    turn = RunTurn(turn=1, model="m", tokens_in=10, tokens_out=5, cost_usd=0.5, duration_ms=1)
    history.add(turn, env(ns=5))
    history.add(turn.model_copy(update={"turn": 2}), env(ns=6))
    expires = datetime.now(UTC)
    ask = ApprovalRequested(
        approval_id="a1", tool="exit_plan_mode", summary="p", why="w", expires_at=expires
    )
    history.add(ask, env(ns=7))
    history.add(ApprovalDecided(approval_id="a1", decision="approved"), env(ns=8))
    history.add(ToolCalled(turn=2, call_id="c1", tool="run_shell", arguments={}), env(ns=9))
    history.add(ToolCalled(turn=2, call_id="c2", tool="read_file", arguments={}), env(ns=10))
    history.add(result("c2", "read_file"), env(ns=11))
    history.add(turn, env(source="scheduler", ns=99))  # not a sign of the runner's life
    assert (history.usage.turns, history.usage.tokens_in, history.usage.tokens_out) == (3, 30, 15)
    assert history.plan_approved
    assert history.unfinished_calls == ["c1"]
    assert history.last_sign_ns == 11
    assert not history.ended
    history.add(RunCompleted(result=RunResult(summary="s")), env(ns=12))
    assert history.ended


def test_a_finish_already_accepted_is_the_result_of_the_resumed_attempt() -> None:
    from nexus_runner.loop import _finished_before

    def call(name: str, args: str, call_id: str) -> dict[str, Any]:
        return {"id": call_id, "type": "function", "function": {"name": name, "arguments": args}}

    finish = call("finish", '{"summary": "done", "details": {"n": 3}}', "f1")
    head: list[dict[str, Any]] = [{"role": "user", "content": "task"}]
    asked = [*head, {"role": "assistant", "content": None, "tool_calls": [finish]}]
    accepted = [*asked, {"role": "tool", "tool_call_id": "f1", "content": "run finished"}]
    found = _finished_before(accepted)
    assert found is not None
    assert (found.summary, found.details) == ("done", {"n": 3})
    # Not answered yet, or answered with a misfit: the model is asked again.
    assert _finished_before(asked) is None
    misfit = [*asked, {"role": "tool", "tool_call_id": "f1", "content": "error: details"}]
    assert _finished_before(misfit) is None
    # Another tool's answer after it: not a finish.
    other = [*head, {"role": "assistant", "tool_calls": [call("read_file", "{}", "r1")]}]
    assert (
        _finished_before([*other, {"role": "tool", "tool_call_id": "r1", "content": "x"}]) is None
    )
