"""The live view's fold of run events (pure)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from rich.console import Console

from nexus_cli.errors import ExitCode
from nexus_cli.runview import RunView, describe

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def fold(*events: tuple[str, dict[str, object]]) -> RunView:
    view = RunView("run_1")
    for i, (name, body) in enumerate(events):
        view.apply(name, body, T0 + timedelta(seconds=i))
    return view


def test_a_completed_run() -> None:
    view = fold(
        ("requested", {"agent_id": "impl"}),
        ("prepared", {"config": {"agent_id": "impl"}}),
        ("dispatched", {"runtime": "local", "handle": "1"}),
        ("started", {}),
        ("turn", {"turn": 1, "tokens_in": 10, "tokens_out": 2, "cost_usd": 0.5}),
        ("tool_called", {"turn": 1, "tool": "read_file"}),
        ("tool_result", {"turn": 1, "tool": "read_file", "ok": True}),
        ("turn", {"turn": 2, "tokens_in": 5, "tokens_out": 1, "cost_usd": 0.25}),
        (
            "completed",
            {
                "reason": "succeeded",
                "tokens_in": 15,
                "tokens_out": 3,
                "cost_usd": 0.75,
                "result": {"summary": "done"},
            },
        ),
    )
    assert (view.agent_id, view.status, view.turns, view.tool_calls) == ("impl", "completed", 2, 1)
    assert (view.tokens_in, view.tokens_out, view.cost_usd) == (15, 3, 0.75)
    assert view.elapsed() == 8.0
    assert view.exit_code() is ExitCode.OK
    assert view.recent[-1] == "completed: done"


def test_failed_and_cancelled_runs_exit_1() -> None:
    failed = fold(("requested", {"agent_id": "x"}), ("failed", {"reason": "unknown_agent"}))
    assert (failed.status, failed.reason, failed.exit_code()) == (
        "failed",
        "unknown_agent",
        ExitCode.RUN_FAILED,
    )
    cancelled = fold(("started", {}), ("cancel_requested", {}), ("cancelled", {}))
    assert cancelled.status == "cancelled"
    assert cancelled.exit_code() is ExitCode.RUN_FAILED


def test_terminal_is_final_and_approvals_toggle() -> None:
    view = fold(
        ("started", {}),
        ("approval_requested", {"approval_id": "a1", "summary": "push"}),
    )
    assert view.status == "awaiting_approval"
    assert view.pending_approvals == {"a1": "push"}
    view.apply("approval_decided", {"approval_id": "a1", "decision": "approved"}, None)
    assert (view.status, view.pending_approvals) == ("running", {})
    view.apply("completed", {"reason": "succeeded"}, None)
    view.apply("heartbeat", {"seq": 9}, None)  # late: changes nothing
    assert view.status == "completed"


def test_render_and_describe() -> None:
    view = fold(("started", {}), ("approval_requested", {"approval_id": "a1", "summary": "rm"}))
    console = Console(width=120, record=True)
    console.print(view.render(T0 + timedelta(seconds=5)))
    text = console.export_text()
    assert "awaiting_approval" in text
    assert "nexus approve run_1 a1" in text
    assert (
        describe("queued", {"position": 2, "limit": "agent"})
        == "queued at position 2 (agent limit)"
    )
    unavailable = {"server": "github", "reason": "exited", "detail": "exited with code 1"}
    assert (
        describe("mcp_server_unavailable", unavailable)
        == "mcp_server_unavailable github: exited with code 1"
    )


def test_every_exit_code_is_documented() -> None:
    from pathlib import Path

    doc = (Path(__file__).parents[3] / "docs" / "cli.md").read_text()
    for code in ExitCode:
        assert f"\n| {int(code)} |" in doc, code


def test_delegated_runs_sit_under_their_parent_in_ps() -> None:
    from nexus_cli.runview import delegation_tree, tree_label

    runs = [  # newest first, as runs.list answers
        {"run_id": "child-b", "parent_run_id": "parent"},
        {"run_id": "other", "parent_run_id": None},
        {"run_id": "grandchild", "parent_run_id": "child-a"},
        {"run_id": "child-a", "parent_run_id": "parent"},
        {"run_id": "parent", "parent_run_id": None},
        {"run_id": "orphan", "parent_run_id": "gone"},
    ]
    shown = [tree_label(r["run_id"], depth) for r, depth in delegation_tree(runs)]
    assert shown == [
        "other",
        "parent",
        "└ child-b",
        "└ child-a",
        "  └ grandchild",
        "orphan",
    ]
    looped = [{"run_id": "x", "parent_run_id": "y"}, {"run_id": "y", "parent_run_id": "x"}]
    assert sorted(r["run_id"] for r, _ in delegation_tree(looped)) == ["x", "y"]


def test_a_refused_answer_is_shown_and_leaves_the_run_waiting():
    view = RunView("run_1")
    view.apply("approval_requested", {"approval_id": "ap1", "summary": "rm"}, None)
    view.apply("approval_refused", {"approval_id": "ap1", "answered_by": "slack:U2"}, None)
    assert (view.status, view.phase) == ("awaiting_approval", "approval_requested")
    assert view.pending_approvals == {"ap1": "rm"}
    assert view.recent[-1] == "approval_refused ap1: slack:U2 may not decide"


def test_an_egress_event_is_one_line_with_its_verdict() -> None:
    allowed = {"method": "GET", "host": "pypi.org", "port": 80, "path": "/simple/",
               "allowed": True, "status": 200, "reason": "grant pypi.org"}  # fmt: skip
    reason = "no egress grant for evil.org:443"
    refused = {"method": "CONNECT", "host": "evil.org", "port": 443, "path": None,
               "allowed": False, "status": 403, "reason": reason}  # fmt: skip
    assert describe("egress", allowed) == "egress GET pypi.org:80/simple/ -> 200: grant pypi.org"
    assert describe("egress", refused) == (
        "egress CONNECT evil.org:443 refused: no egress grant for evil.org:443"
    )


def test_dispatched_says_whether_a_warm_runner_was_handed_the_run() -> None:
    cold = {"runtime": "local", "handle": "41", "attempt": 1, "warm": False}
    assert describe("dispatched", cold) == "dispatched to local (41)"
    warm = {**cold, "warm": True}
    assert describe("dispatched", warm) == "dispatched to local (41, a warm runner)"
