"""The lab's pure views: `runview.lab_lines` (attach), the lab events' lines, the live view's
first divergence, `rundiff.fold_trace` on a resumed run's repeated events, and --skill."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from nexus_events.contract.runstate import RunEvent
from nexus_events.events import RunDiverged, RunGoldenMarked, ToolCalled, ToolResult
from nexus_events.events.lab_specs import DivergenceKind, OnDivergence
from nexus_events.events.queries import RunEventView

from nexus_cli.commands.lab_runs import skill_revisions
from nexus_cli.errors import CliError
from nexus_cli.rundiff import fold_trace
from nexus_cli.runview import RunView, describe, lab_lines

ROW: dict[str, Any] = {
    "run_id": "run_b",
    "status": "completed",
    "reason": "diverged",
    "message": None,
    "agent_id": "a",
    "task_id": None,
    "origin": "lab",
    "input": "",
    "requested_by": "me",
    "parent_run_id": None,
    "attempt": 1,
    "runtime": None,
    "runtime_handle": None,
    "queue_position": None,
    "catalog_revisions": {},
    "phases": {},
    "ended_at": None,
    "last_event_at": None,
    "turns": 3,
    "tokens_in": 0,
    "tokens_out": 0,
    "cost_usd": 0.0,
    "result": None,
    "last_seq": 9,
}


def test_lab_lines_show_every_link_set_and_nothing_otherwise() -> None:
    assert lab_lines(ROW) == []
    assert lab_lines({"run_id": "x"}) == []  # a reply this CLI cannot read: no lines
    row = {
        **ROW,
        "replay_of": "run_a",
        "forked_from": "run_z",
        "fork_turn": 7,
        "forks": ["run_c", "run_d"],
        "golden": True,
        "diverged_at": 3,
        "divergence": "tool_result",
        "canary_arm": "candidate",
    }
    assert lab_lines(row) == [
        ("replay of", "run_a"),
        ("forked from", "run_z@7"),
        ("forks", "run_c, run_d"),
        ("golden", "yes (an eval case)"),
        ("divergence", "at turn 3 (tool_result)"),
        ("canary arm", "candidate"),
    ]


def test_lab_events_read_as_lines_and_the_live_view_keeps_the_first_divergence() -> None:
    first = RunDiverged(
        turn=1,
        kind=DivergenceKind.SYSTEM_PROMPT,
        detail="the system prompt changed",
        action=OnDivergence.LIVE,
    ).model_dump(mode="json")
    later = {**first, "turn": 5}
    view = RunView("run_b")
    view.apply(RunEvent.DIVERGED, first, None)
    view.apply(RunEvent.DIVERGED, later, None)
    line = "diverged at turn 1 (system_prompt): the system prompt changed [went on live]"
    assert view.divergence == line
    assert view.as_dict()["divergence"] == line
    mark = RunGoldenMarked(marked_by="ann", note="reference").model_dump(mode="json")
    assert describe(RunEvent.GOLDEN_MARKED, mark) == "marked golden by ann: reference"
    unmark = RunGoldenMarked(golden=False).model_dump(mode="json")
    assert describe(RunEvent.GOLDEN_MARKED, unmark) == "golden mark taken back"
    assert describe(RunEvent.DIVERGED, {"turn": "x"}) == RunEvent.DIVERGED  # unreadable body


def _event(name: RunEvent, body: Any, seconds: int) -> RunEventView:
    at = datetime(2026, 1, 1, tzinfo=UTC) + timedelta(seconds=seconds)
    return RunEventView(
        seq=seconds + 1,
        event=name,
        time=at,
        event_id=f"e{seconds}",
        source="runner",
        body=body.model_dump(mode="json") if hasattr(body, "model_dump") else body,
    )


def test_a_resumed_runs_repeated_call_counts_once() -> None:
    call = ToolCalled(turn=1, call_id="c1", tool="list_files", arguments={"path": "."})
    result = ToolResult(turn=1, call_id="c1", tool="list_files", ok=True, output="a.py")
    events = [
        _event(RunEvent.STARTED, {}, 0),
        _event(RunEvent.TOOL_CALLED, call, 1),
        _event(RunEvent.TOOL_RESULT, result, 2),
        _event(RunEvent.TOOL_CALLED, call, 3),  # the resumed attempt publishes it again
        _event(RunEvent.TOOL_CALLED, {"turn": "bad"}, 4),  # unreadable: skipped
        _event(RunEvent.COMPLETED, {}, 10),
    ]
    trace = fold_trace("run_a", events)
    [only] = trace.turn_calls(1)
    assert (only.tool, only.ok, only.output) == ("list_files", True, "a.py")
    assert trace.wall_seconds == 10.0


def test_skill_revisions_parse_and_refuse() -> None:
    assert skill_revisions(["style@3", "my-skill@12"]) == {"style": 3, "my-skill": 12}
    for bad in ("style", "@3", "style@", "style@0", "style@-1", "style@x", "a b@1"):
        with pytest.raises(CliError):
            skill_revisions([bad])
    with pytest.raises(CliError, match="given twice"):
        skill_revisions(["a@1", "a@2"])
