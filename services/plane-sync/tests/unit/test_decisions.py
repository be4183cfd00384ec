"""Pure parts of plane-sync: what events ask of Plane, the rate limit, signatures, HTML."""

from __future__ import annotations

import hashlib
import hmac
from datetime import UTC, datetime

import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st
from nexus_events.contract.runstate import LIVE, RunStatus, next_status
from nexus_events.contract.subjects import Family
from nexus_events.events import (
    ApprovalRequested,
    Column,
    Event,
    RunCancelled,
    RunCompleted,
    RunFailed,
    RunResult,
    RunResumed,
    RunResuming,
    RunSleeping,
    RunStarted,
    RunTurn,
    RunWake,
    TaskCreated,
    TaskMoved,
    ToolCalled,
    lookup,
)
from pydantic import ValidationError

from nexus_plane_sync import render
from nexus_plane_sync.config import DEFAULT_RUN_COLUMNS, PlaneSyncSettings
from nexus_plane_sync.decisions import ACTIVE_STATUSES, RunState, evolve, run_writes, task_writes
from nexus_plane_sync.mirror import RUN_EVENTS
from nexus_plane_sync.plane_api import reset_seconds
from nexus_plane_sync.ratelimit import TokenBucket
from nexus_plane_sync.webhooks import key_of, verify


def test_task_writes_skip_tasks_filed_from_plane() -> None:
    mine = TaskCreated(title="x")
    theirs = TaskCreated(title="x", external_id="wi", external_source="plane")
    [write] = task_writes(mine, "t1", 5, mirror=True)
    assert (write.write_id, write.op, write.slot) == ("item:t1:5", "work_item_upsert", "item:t1")
    assert task_writes(theirs, "t1", 5, mirror=True) == []
    assert task_writes(mine, "t1", 5, mirror=False) == []
    [move] = task_writes(TaskMoved(column=Column.DONE), "t1", 6, mirror=True)
    assert move.payload == {"column": "done"}
    from_plane = TaskMoved(column=Column.DONE, moved_by="plane:ada")
    assert task_writes(from_plane, "t1", 7, mirror=True) == []


def _writes(event: object, name: str, run: RunState, seq: int = 1) -> list:  # type: ignore[type-arg]
    return run_writes(event, name, run, seq, columns=DEFAULT_RUN_COLUMNS, progress=True)  # type: ignore[arg-type]


def test_run_writes_report_and_move_the_item() -> None:
    run = RunState("r1", "t1", "coder")
    report, move = _writes(RunStarted(), "started", run)
    assert (report.write_id, report.op, report.payload["kind"]) == (
        "run:r1:started", "run_report", "started",
    )  # fmt: skip
    assert move.payload == {"column": "in_progress"}
    approval = ApprovalRequested(
        approval_id="a1", tool="shell", summary="rm x", expires_at=datetime.now(UTC)
    )
    ask = _writes(approval, "approval_requested", run)[0]
    assert ask.write_id == "run:r1:approval:a1"
    assert "/approve a1" in ask.payload["html"]
    assert ask.payload["activity"] == "elicitation"
    progress = _writes(RunTurn(turn=3), "turn", run, seq=9)
    assert [(w.slot, w.write_id) for w in progress] == [("progress:r1", "run:r1:progress:9")]
    done = _writes(RunCompleted(result=RunResult(pr_url="https://x/pr/1")), "completed", run)
    assert "https://x/pr/1" in done[0].payload["html"]
    failed = _writes(RunFailed(reason="llm_unavailable", message="503"), "failed", run)
    assert "llm_unavailable" in failed[0].payload["html"]
    assert _writes(RunStarted(), "started", RunState("r2")) == []  # no task, no work item


def test_a_resume_reports_once_per_attempt_and_resumed_ends_an_approval_wait() -> None:
    run = RunState("r1", "t1", "coder", status="awaiting_approval")
    [second] = _writes(RunResuming(attempt=2, reason="runtime_gone"), "resuming", run, seq=7)
    [again] = _writes(RunResuming(attempt=2, reason="runtime_gone"), "resuming", run, seq=9)
    [third] = _writes(RunResuming(attempt=3, reason="heartbeat_missing"), "resuming", run)
    # The write id names the attempt, not the stream sequence: a repeat queues nothing new.
    assert second.write_id == again.write_id == "run:r1:resuming:2"
    assert third.write_id == "run:r1:resuming:3"
    assert "Resumed after runner loss (attempt 2)" in second.payload["html"]
    assert second.payload["body"] == "Resumed after runner loss (attempt 2)."
    evolve(run, RunResuming(attempt=2, reason="runtime_gone"), "resuming")
    assert run.status == "awaiting_approval"  # the scheduler's word moves nothing
    evolve(run, RunResumed(attempt=2, turns=3, messages=7, entries=8), "resumed")
    assert run.status == "running"


def test_a_sleep_says_sleeping_until_once_and_the_wake_says_why() -> None:
    run = RunState("r1", "t1", "coder", status="running")
    until = datetime(2026, 11, 29, 14, 5, tzinfo=UTC)
    sleeping = RunSleeping(until=until, reason="waiting for <CI>", attempt=1, turn=3)
    [first] = _writes(sleeping, "sleeping", run, seq=7)
    [again] = _writes(sleeping, "sleeping", run, seq=9)
    assert first.write_id == again.write_id == "run:r1:sleeping:1"
    assert first.payload["body"] == "Sleeping until 2026-11-29 14:05 UTC: waiting for <CI>"
    assert "Sleeping until 2026-11-29 14:05 UTC: waiting for &lt;CI&gt;" in first.payload["html"]
    evolve(run, sleeping, "sleeping")
    assert run.status == "sleeping"
    wake = RunWake(cause="signal", slept_until=until, text="CI is green")
    [woke] = _writes(RunResuming(attempt=2, reason="woke", wake=wake), "resuming", run)
    assert woke.write_id == "run:r1:resuming:2"
    assert woke.payload["body"] == "Woke (signal): attempt 2."
    assert "Resumed after runner loss" not in woke.payload["html"]
    evolve(run, RunResumed(attempt=2, turns=3, messages=7, entries=8), "resumed")
    assert run.status == "running"


def test_terminal_states_are_final() -> None:
    run = RunState("r1", "t1")
    evolve(run, RunStarted(), "started")
    assert run.status == "running"
    evolve(run, RunCompleted(), "completed")
    evolve(run, RunStarted(), "started")
    assert run.status == "completed"


def test_the_bucket_spaces_calls_and_a_429_blocks_it() -> None:
    now = [0.0]
    bucket = TokenBucket(rate=2.0, burst=2, clock=lambda: now[0])
    assert bucket.delay() == 0
    bucket._tokens = 0.0
    assert bucket.delay() == 0.5
    now[0] = 0.5
    assert bucket.delay() == 0
    bucket.block_for(10)
    assert bucket.delay() == 10
    now[0] = 10.5
    assert bucket.delay() == 0  # one call at the reset...
    bucket._tokens -= 1
    assert bucket.delay() == 0.5  # ...then the rate again


def test_reset_header_as_unix_time_or_seconds() -> None:
    assert reset_seconds(httpx.Headers({"X-RateLimit-Reset": "1700000030"}), 1_700_000_000) == 30
    assert reset_seconds(httpx.Headers({"Retry-After": "7"}), 0) == 7
    assert reset_seconds(httpx.Headers({}), 0) == 1


def test_signatures_are_checked_on_the_raw_body() -> None:
    body = b'{"a": 1}'
    good = hmac.new(b"s", body, hashlib.sha256).hexdigest()
    assert verify(b"s", body, good)
    assert verify(b"s", body, good.upper())
    assert not verify(b"s", body + b" ", good)
    assert not verify(b"s", body, None)
    assert not verify(b"t", body, good)


def test_webhook_keys_and_comment_text() -> None:
    assert key_of("issue", {"id": "abc-1"}) == "abc-1"
    assert key_of("issue_comment", {"issue": "abc-2", "id": "c"}) == "abc-2"
    assert key_of("issue", {"id": "has.dot"}) == "workspace"
    assert render.plain_text("<p>/approve a1</p><p>ok &amp; go</p>") == "/approve a1\nok & go"
    assert "&lt;script&gt;" in render.started("r1", "<script>")


def test_a_child_run_reports_under_its_root_and_moves_nothing() -> None:
    from nexus_events.events import RunRequested

    from nexus_plane_sync.children import child_run_writes

    child = RunState("c1", "t1", "reviewer", parent_run_id="p1", root_run_id="r0")
    [asked] = child_run_writes(
        RunRequested(agent_id="reviewer", task_id="t1", parent_run_id="p1"), "requested", child, 3
    )
    assert (asked.write_id, asked.op, asked.run_id) == ("run:c1:requested", "run_report", "c1")
    assert asked.payload["agent_run_of"] == "r0"
    assert "Delegated to <strong>reviewer</strong>" in asked.payload["html"]
    assert child_run_writes(RunStarted(), "started", child, 4) == []
    assert child_run_writes(RunTurn(turn=1), "turn", child, 5) == []
    approval = ApprovalRequested(
        approval_id="a9", tool="shell", summary="rm x", expires_at=datetime.now(UTC)
    )
    [ask] = child_run_writes(approval, "approval_requested", child, 6)
    assert (ask.write_id, ask.payload["agent_run_of"]) == ("run:c1:approval:a9", "r0")
    done = RunCompleted(result=RunResult(summary="fine"))
    [result] = child_run_writes(done, "completed", child, 7)
    assert result.payload["body"] == "reviewer (run c1): fine"
    [failed] = child_run_writes(RunFailed(reason="stuck"), "failed", child, 8)
    assert failed.payload["kind"] == "ended"
    assert "stuck" in failed.payload["html"]
    # Every write is a report: no work item move among them.
    assert all(w.op == "run_report" for w in (asked, ask, result, failed))
    # A run without a parent is no child (the root's own writes are run_writes').
    assert child_run_writes(done, "completed", RunState("r0", "t1", "impl"), 9) == []


def _fold(names: list[str], start: str | None = None) -> str | None:
    status: str | None = start
    for name in names:
        new = next_status(status, name)
        status = status if new is None else new.value
    return status


def _event(name: str) -> Event:
    """A run event of that name: the fields evolve reads set, the rest left out."""
    if name == "turn":
        return RunTurn(turn=1)
    if name == "tool_called":
        return ToolCalled(turn=1, call_id="c1", tool="shell")
    return lookup(Family.RUN, name).model_construct()


MIRRORED_RUNS = st.lists(st.sampled_from(sorted(str(e) for e in RUN_EVENTS)), max_size=12)


@given(MIRRORED_RUNS)
def test_the_mirrors_run_status_is_the_contracts(names: list[str]) -> None:
    """plane-sync keeps no state machine of its own: a run's status after any sequence of the
    events it reads is what `nexus_events.contract.runstate` says (core's agent_runs agrees)."""
    run = RunState("r1", "t1")
    for name in names:
        evolve(run, _event(name), name)
    assert run.status == (_fold(names) or "requested")
    assert run.status in {s.value for s in RunStatus}


def test_a_run_asked_to_cancel_stays_active_until_it_ends() -> None:
    run = RunState("r1", "t1")
    for name in ("requested", "prepared", "cancel_requested"):
        evolve(run, _event(name), name)
    assert run.status == "prepared"
    assert run.status in ACTIVE_STATUSES  # a Plane comment or stop still reaches it
    evolve(run, RunCancelled(), "cancelled")
    assert run.status == "cancelled"
    assert run.status not in ACTIVE_STATUSES


def test_a_row_written_by_an_older_mirror_still_evolves() -> None:
    """Rows of plane-sync versions before runstate say `cancelling`: read as running (it was
    a live run asked to stop), not as a status runstate rejects, which would wedge the mirror."""
    run = RunState("r1", "t1", status="cancelling")
    assert run.status in ACTIVE_STATUSES
    evolve(run, RunTurn(turn=2), "turn")
    assert run.status == "running"
    evolve(run, RunCancelled(), "cancelled")
    assert run.status == "cancelled"
    assert set(ACTIVE_STATUSES) >= {s.value for s in LIVE}


def test_run_columns_name_run_events_and_board_columns() -> None:
    """A misspelt event in NEXUS_PLANE_RUN_COLUMNS would never move an item: refused at start."""
    base = {
        "plane_url": "http://plane", "plane_api_key": "k", "plane_workspace": "w",
        "plane_project_id": "p", "plane_webhook_secret": "s",
    }  # fmt: skip
    ok = PlaneSyncSettings(**base, plane_run_columns={"completed": "review"})  # type: ignore[arg-type]
    assert ok.plane_run_columns == {"completed": "review"}
    with pytest.raises(ValidationError, match=r"'complete'.*not a run event"):
        PlaneSyncSettings(**base, plane_run_columns={"complete": "done"})  # type: ignore[arg-type]
    with pytest.raises(ValidationError, match=r"'finished'.*not a board column"):
        PlaneSyncSettings(**base, plane_run_columns={"completed": "finished"})  # type: ignore[arg-type]
