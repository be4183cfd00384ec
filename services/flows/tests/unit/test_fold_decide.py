"""The pure core: fold is idempotent, decide routes, counts rounds, escalates, joins maps and
decides expired gates with their default."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from nexus_events.events import Event
from nexus_events.events.flows import (
    FlowAccepted,
    FlowDefinition,
    FlowRequested,
    FlowResumed,
    FlowStepFinished,
    FlowStepStarted,
    FlowWaiting,
)

from nexus_flows.decide import decide, run_input
from nexus_flows.records import FlowState
from nexus_flows.state import fold

T0 = datetime(2026, 1, 1, tzinfo=UTC)

LOOP = FlowDefinition.model_validate(
    {
        "id": "loop",
        "steps": [
            {"id": "work", "kind": "run", "agent": "w", "input": "go {{ input }}",
             "max_rounds": 2, "on_max_rounds": "more"},
            {"id": "check", "kind": "run", "agent": "c",
             "next": [{"when": "check.again", "to": "work"}, {"to": "end"}]},
            {"id": "more", "kind": "gate", "summary": "more?", "expires_in": 60,
             "default": "approved", "next": [{"when": "more.approved", "to": "work"}]},
        ],
    }
)  # fmt: skip


def run(events: list[Event], definition: FlowDefinition = LOOP) -> FlowState:
    state: FlowState | None = None
    for n, e in enumerate(events):
        state = fold(state, "f", e, T0 + timedelta(seconds=n))
    assert state is not None
    return state


def accepted(definition: FlowDefinition = LOOP) -> list[Event]:
    return [
        FlowRequested(flow=definition.id, input="now"),
        FlowAccepted(flow=definition.id, revision=1, definition=definition),
    ]


def names(state: FlowState, definition: FlowDefinition = LOOP) -> list[tuple[str, Any]]:
    out = []
    for o in decide(state, definition):
        e = o.event
        out.append((e.event_name, getattr(e, "step", None), getattr(e, "round", None)))
    return out


def started(step: str, round: int = 1, kind: str = "run", **kw: Any) -> FlowStepStarted:
    return FlowStepStarted(step=step, round=round, kind=kind, **kw)  # type: ignore[arg-type]


def ok(step: str, round: int = 1, item: int | None = None, **output: Any) -> FlowStepFinished:
    return FlowStepFinished(step=step, round=round, item=item, status="succeeded", output=output)


def test_fold_is_idempotent_event_by_event() -> None:
    events = [*accepted(), started("work", run_id="f-work-r1"), ok("work"), started("check")]
    once = run(events)
    twice: FlowState | None = None
    for n, e in enumerate(events):
        at = T0 + timedelta(seconds=n)
        twice = fold(fold(twice, "f", e, at), "f", e, at)
    assert twice == once
    # A repeat later on (after JetStream's duplicate window) changes nothing either.
    assert fold(once, "f", events[2], T0 + timedelta(hours=1)) is once
    assert list(once.steps) == ["work/1/", "check/1/"]


def test_decide_starts_the_first_step_with_its_input_and_run_id() -> None:
    [out] = decide(run(accepted()), LOOP)
    assert isinstance(out.event, FlowStepStarted)
    assert (out.event.step, out.event.round, out.event.run_id) == ("work", 1, "f-work-r1")
    assert out.event.input == "go now"
    assert out.msg_id == "flow:f:step_started:work:1:-"
    assert decide(run(accepted()), LOOP)[0].msg_id == out.msg_id  # deterministic


def test_routes_loop_back_in_a_new_round_then_escalate_to_the_gate() -> None:
    events = [*accepted(), started("work"), ok("work"), started("check"), ok("check", again=True)]
    assert names(run(events)) == [("step_started", "work", 2)]
    events += [started("work", 2), ok("work", 2), started("check", 2), ok("check", 2, again=True)]
    assert names(run(events)) == [("escalated", "work", 3), ("step_started", "more", 1)]


def test_no_route_matching_falls_through_and_end_completes() -> None:
    events = [*accepted(), started("work"), ok("work"), started("check"), ok("check", again=False)]
    assert names(run(events)) == [("completed", None, None)]


def gate_events(by: str) -> list[Event]:
    events: list[Event] = [*accepted(), started("work"), ok("work"), started("check"),
                           ok("check", again=True), started("work", 2), ok("work", 2),
                           started("check", 2), ok("check", 2, again=True)]  # fmt: skip
    state = run(events)
    events += [o.event for o in decide(state, LOOP)]  # escalated + gate started
    state = run(events)
    events += [o.event for o in decide(state, LOOP) if isinstance(o.event, FlowWaiting)]
    events.append(FlowResumed(step="more", round=1, by=by))  # type: ignore[arg-type]
    return events


def test_expired_gate_decides_with_its_default_and_grants_rounds() -> None:
    state = run(gate_events("expired"))
    [finished] = [o.event for o in decide(state, LOOP)]
    assert isinstance(finished, FlowStepFinished)
    assert finished.output["approved"] is True  # default: approved
    state = run([*gate_events("expired"), finished])
    assert state.bonus == {"work": 2}
    assert names(state) == [("step_started", "work", 3)]


def test_gate_waiting_expires_at_start_plus_expires_in() -> None:
    events = gate_events("approved")[:-1]
    state = run(events)
    gate = state.steps["more/1/"]
    assert gate.waiting is not None
    assert gate.started_at is not None
    assert gate.waiting.until == gate.started_at + timedelta(seconds=60)


MAP = FlowDefinition.model_validate(
    {
        "id": "m",
        "steps": [
            {"id": "fan", "kind": "map", "agent": "a", "over": "[1, 2, 3]", "concurrency": 2,
             "join": {"quorum": 2}},
        ],
    }
)  # fmt: skip


def test_map_starts_within_concurrency_and_joins_on_quorum() -> None:
    events: list[Event] = [*accepted(MAP), started("fan", kind="map", items=3)]
    assert [o.event.item for o in decide(run(events, MAP), MAP)] == [0, 1]  # type: ignore[attr-defined]
    events += [started("fan", kind="map", item=i, run_id=f"r{i}") for i in (0, 1)]
    events.append(ok("fan", item=0, v=0))
    assert [o.event.item for o in decide(run(events, MAP), MAP)] == [2]  # type: ignore[attr-defined]
    events += [started("fan", kind="map", item=2, run_id="r2"), ok("fan", item=2, v=2)]
    out = decide(run(events, MAP), MAP)
    assert next(o.subject for o in out) == "nexus.agent.run.v1.r1.cancel_requested"
    finished = out[-1].event
    assert isinstance(finished, FlowStepFinished)
    assert finished.status == "succeeded"
    assert finished.output == {"items": [{"v": 0}, None, {"v": 2}], "succeeded": 2, "failed": 0}


def test_terminal_flows_are_final() -> None:
    events = [*accepted(), started("work"), ok("work"), started("check"), ok("check", again=False)]
    state = run(events)
    [completed] = [o.event for o in decide(state, LOOP)]
    final = run([*events, completed, started("work", 2)])
    assert final.status == "completed"
    assert "work/2/" not in final.steps
    assert decide(final, LOOP) == []


def test_a_long_input_is_cut_in_the_event_and_whole_in_the_run_request() -> None:
    events = [FlowRequested(flow="loop", input="x" * 5000),
              FlowAccepted(flow="loop", revision=1, definition=LOOP)]  # fmt: skip
    [out] = decide(run(events), LOOP)
    assert isinstance(out.event, FlowStepStarted)
    assert len(out.event.input) == 4000
    state = run([*events, out.event])
    assert run_input(state, LOOP, state.steps["work/1/"]) == "go " + "x" * 5000


def test_steps_outside_the_pinned_definition_are_ignored() -> None:
    state = run([*accepted(), started("nosuch"), ok("nosuch")])
    assert state.steps == {}
    assert names(state) == [("step_started", "work", 1)]


def test_a_step_works_on_the_branch_the_step_before_it_left() -> None:
    from nexus_events.events.specs import RepoSpec

    from nexus_flows.engine import carried_repo

    base = [
        FlowRequested(flow="loop", input="now", repo=RepoSpec(url="/srv/repo", ref="main")),
        FlowAccepted(flow="loop", revision=1, definition=LOOP),
    ]
    first = run([*base, started("work", run_id="f-work-r1")])
    assert carried_repo(first, LOOP, first.steps["work/1/"]) == RepoSpec(
        url="/srv/repo", ref="main"
    )
    done = FlowStepFinished(step="work", status="succeeded", branch="nexus/f-work-r1")
    state = run([*base, started("work", run_id="f-work-r1"), done, started("check")])
    check = state.steps["check/1/"]
    assert carried_repo(state, LOOP, check) == RepoSpec(url="/srv/repo", ref="nexus/f-work-r1")
    # Round 2 of `work` starts from the branch round 1 left, whatever finishes after it.
    later = run([
        *base, started("work", run_id="f-work-r1"), done, started("check"),
        ok("check", again=True), started("work", round=2, run_id="f-work-r2"),
        FlowStepFinished(step="work", round=2, status="succeeded", branch="nexus/f-work-r2"),
    ])  # fmt: skip
    assert carried_repo(later, LOOP, later.steps["work/2/"]).ref == "nexus/f-work-r1"  # type: ignore[union-attr]
