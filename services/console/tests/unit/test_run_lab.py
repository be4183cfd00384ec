"""What the run page shows of the lab, from core's RunView and the run's events: the view's
links taken as they are, the events filling what the view leaves out, a canary arm with its
revision, and nothing at all for a plain run."""

from __future__ import annotations

from typing import Any

from nexus_events.contract.runstate import RunEvent
from nexus_events.contract.subjects import Family

from nexus_console.live.hub import LiveEvent
from nexus_console.run_lab import lab_links


def _event(seq: int, name: RunEvent, body: dict[str, Any], poison: str | None = None) -> LiveEvent:
    return LiveEvent(Family.RUN, f"nexus.agent.run.v1.r.{name}", "NEXUS_RUNS", seq, name,
                     {"run_id": "r"}, body, poison=poison)  # fmt: skip


def test_a_plain_run_has_no_lab_links() -> None:
    assert not lab_links({"run_id": "r"}, [_event(1, RunEvent.REQUESTED, {"input": "x"})])


def test_the_views_fields_are_shown_when_the_events_say_nothing() -> None:
    view = {
        "replay_of": "src", "forks": ["f1", "f2"], "golden": True, "diverged_at": 3,
        "divergence": "skills", "canary_arm": "candidate",
    }  # fmt: skip
    links = lab_links(view, [])
    assert links.replay_of == "src"
    assert links.forks == ["f1", "f2"]
    assert links.golden is True
    assert links.divergence is not None
    divergence = links.divergence
    assert (divergence.turn, divergence.kind, divergence.seq) == (3, "skills", None)
    assert links.canary is not None
    assert (links.canary.arm, links.canary.revision) == ("candidate", None)


def test_the_events_give_the_fork_the_canary_arm_and_the_divergence() -> None:
    events = [
        _event(1, RunEvent.REQUESTED, {"lab": {"mode": "fork", "source_run_id": "src",
                                               "at_turn": 4, "input": "try X"}}),
        _event(2, RunEvent.PREPARED, {"config": {"canary": {
            "arm": "current", "candidate_revision": 5, "current_revision": 4, "share": 0.1}}}),
        _event(3, RunEvent.DIVERGED, {}, poison="bad json"),
        _event(4, RunEvent.DIVERGED, {"turn": 6, "kind": "tool_result", "detail": "d",
                                      "action": "live"}),
    ]  # fmt: skip
    links = lab_links({"run_id": "r"}, events)
    assert (links.forked_from, links.fork_turn, links.fork_input) == ("src", 4, "try X")
    assert links.replay_of is None
    assert links.canary is not None
    assert (links.canary.arm, links.canary.revision, links.canary.share) == ("current", 4, 0.1)
    assert links.divergence is not None
    assert (links.divergence.turn, links.divergence.kind, links.divergence.seq) == (
        6, "tool_result", 4,
    )  # fmt: skip


def test_a_malformed_lab_request_is_left_to_the_timeline() -> None:
    events = [_event(1, RunEvent.REQUESTED, {"lab": {"mode": "fork", "source_run_id": "src"}})]
    assert not lab_links({"run_id": "r"}, events)
