"""`nexus agents show`'s canary lines: each arm's standing from core's CanaryView, and the
decision once core took it."""

from __future__ import annotations

from nexus_cli.commands.agents import canary_lines


def _arm(revision: int, runs: int, succeeded: int) -> dict[str, object]:
    return {
        "revision": revision, "runs": runs, "succeeded": succeeded,
        "success_rate": succeeded / runs if runs else 0.0, "mean_cost_usd": 0.0125,
        "mean_turns": 3.5,
    }  # fmt: skip


def test_no_canary_prints_nothing() -> None:
    assert canary_lines(None) == []


def test_a_running_canary_shows_both_arms() -> None:
    lines = canary_lines(
        {"candidate": _arm(5, 4, 3), "current": _arm(3, 6, 6), "share": 0.25, "decision": None}
    )
    assert lines == [
        "# canary: share 0.25",
        "#   candidate revision 5: 3/4 completed (75%), mean cost $0.0125, mean turns 3.5",
        "#   current revision 3: 6/6 completed (100%), mean cost $0.0125, mean turns 3.5",
        "#   running: no decision yet",
    ]


def test_a_decided_canary_names_the_rule() -> None:
    lines = canary_lines(
        {
            "candidate": _arm(5, 10, 10), "current": _arm(3, 10, 9), "share": 0.0,
            "decision": "promote", "rule": "candidate within every promote_when limit",
        }
    )  # fmt: skip
    assert lines[-1] == "#   decided: promote (candidate within every promote_when limit)"
