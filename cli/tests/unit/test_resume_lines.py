"""How attach, watch and ps show attempts, resumes, checkpoints and condensations (pure)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from rich.console import Console

from nexus_cli.resumelines import attempt_label
from nexus_cli.runview import RunView, describe

T0 = datetime(2026, 1, 1, tzinfo=UTC)
CONDENSED = {
    "turn": 8,
    "tokens_before": 9000,
    "tokens_after": 3000,
    "budget": 8000,
    "counter": "tiktoken:o200k_base",
    "condensation": {"strategy": "elide", "elided": [3, 5]},
}


def test_resume_event_lines() -> None:
    assert (
        describe("resuming", {"attempt": 2, "reason": "runtime_gone", "message": "pid 42 died"})
        == "resuming after runner loss (attempt 2): pid 42 died"
    )
    assert describe("resuming", {"attempt": 3, "reason": "heartbeat_missing"}) == (
        "resuming after runner loss (heartbeats missing) (attempt 3)"
    )
    resumed = {
        "attempt": 2,
        "turns": 7,
        "messages": 15,
        "entries": 16,
        "checkpoint": "ab12cd34ef56ab12cd34ef56ab12cd34ef56ab12",
        "interrupted_calls": ["c9"],
        "rerun_calls": [],
    }
    assert describe("resumed", resumed) == (
        "resumed after runner loss (attempt 2): 7 turns, checkpoint ab12cd3, 1 interrupted call"
    )
    resumed |= {"checkpoint": None, "interrupted_calls": [], "rerun_calls": ["a", "b"]}
    assert describe("resumed", {**resumed, "turns": 1, "latency_ms": 4500}) == (
        "resumed after runner loss (attempt 2): 1 turn, clean workspace, 2 calls re-run,"
        " 4.5s after the loss"
    )
    assert describe(
        "checkpointed",
        {"turn": 3, "commit": "0123456789abcdef", "object": "r/1-3", "size": 2048, "files": 4},
    ) == ("checkpointed after turn 3: 0123456 (4 files, 2.0 KiB)")
    assert describe("condensed", CONDENSED) == (
        "condensed before turn 8 (elide): 9000 -> 3000 tokens, budget 8000 (tiktoken:o200k_base)"
    )


def test_bodies_of_the_wrong_shape_still_give_a_line() -> None:
    assert describe("resumed", {"attempt": "x", "turns": None, "interrupted_calls": 3}) == (
        "resumed after runner loss (attempt ?): ? turns, clean workspace"
    )
    assert describe("condensed", {"condensation": "elide"}) == (
        "condensed before turn ? (?): ? -> ? tokens, budget ? (?)"
    )
    assert describe("checkpointed", {}) == "checkpointed after turn ?: ?"


def test_attempt_labels() -> None:
    assert attempt_label(2, 3) == "2/3"
    assert attempt_label(1, None) == "1"
    assert attempt_label(None, 2) == "?"


def test_the_live_view_counts_attempts_and_condensations() -> None:
    view = RunView("run_1")
    events = [
        ("prepared", {"config": {"agent_id": "impl", "resume": {"max_attempts": 2}}}),
        ("dispatched", {"runtime": "local", "handle": "1", "attempt": 1}),
        ("started", {}),
        ("condensed", CONDENSED),
        ("resuming", {"attempt": 2, "reason": "runtime_gone"}),
        ("dispatched", {"runtime": "local", "handle": "2", "attempt": 2}),
        ("resumed", {"attempt": 2, "turns": 8, "messages": 9, "entries": 9}),
        ("condensed", CONDENSED),  # the same condensation again: one
        ("condensed", {**CONDENSED, "condensation": {"strategy": "summarise"}}),
    ]
    for i, (name, body) in enumerate(events):
        view.apply(name, body, T0 + timedelta(seconds=i))
    assert (view.status, view.attempt, view.max_attempts) == ("running", 2, 2)
    assert view.as_dict()["condensations"] == 2
    console = Console(width=120, record=True)
    console.print(view.render(T0))
    text = console.export_text()
    assert "2/2   condensations 2" in text
    assert "resumed after runner loss (attempt 2): 8 turns, clean workspace" in text


def test_a_board_card_names_the_attempt_of_a_resumed_run() -> None:
    from nexus_cli.commands.board import _run_label

    assert _run_label({"run_id": "r1", "status": "running", "attempt": 2}) == (
        "r1 running (attempt 2)"
    )
    assert _run_label({"run_id": "r1", "status": "running", "attempt": 1}) == "r1 running"
    assert _run_label({"run_id": "r1", "status": None}) == "r1 ?"  # an older core: no attempt
