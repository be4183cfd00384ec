"""The graph a flow page draws: a node per step (and start/end), an edge per way a flow run
can go, loops marked with their bound, and a flow run's state on each step."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml
from nexus_events.contract.flowgraph import END, successors
from nexus_events.events.flows import FlowDefinition, FlowRunView, FlowStatus, StepStatus

from nexus_console.flowgraph_view import ELSE, NEXT, ON_MAX_ROUNDS, PENDING, START, graph_of

ROOT = Path(__file__).resolve().parents[4]


def feature() -> FlowDefinition:
    text = (ROOT / "examples" / "flows" / "feature.yaml").read_text()
    return FlowDefinition.model_validate(yaml.safe_load(text))


def edges(definition: FlowDefinition) -> list[dict[str, Any]]:
    edges: list[dict[str, Any]] = json.loads(graph_of(definition).to_json())["edges"]
    return edges


def test_every_step_is_a_node_between_start_and_end() -> None:
    graph = json.loads(graph_of(feature()).to_json())
    ids = [n["id"] for n in graph["nodes"]]
    assert ids == [START, "plan", "implement", "review", "more_rounds", "test", END]
    kinds = {n["id"]: n["kind"] for n in graph["nodes"]}
    assert kinds["more_rounds"] == "gate"
    assert kinds["plan"] == "run"
    implement = next(n for n in graph["nodes"] if n["id"] == "implement")
    assert implement["agent"] == "implementer"
    assert implement["max_rounds"] == 3
    assert implement["state"] is None  # a definition alone has no state
    assert {"from": START, "to": "plan", "label": NEXT, "loop": False, "max_rounds": None} in (
        graph["edges"]
    )


def test_edges_are_the_contracts_successors_labelled_by_condition() -> None:
    definition = feature()
    drawn = edges(definition)
    for step, targets in successors(definition).items():
        assert {e["to"] for e in drawn if e["from"] == step} - {END} == set(targets)
    by_pair = {(e["from"], e["to"]): e for e in drawn}
    back = by_pair[("review", "implement")]
    assert back["label"] == 'review.verdict == "request_changes"'
    assert back["loop"] is True
    assert back["max_rounds"] == 3
    assert by_pair[("review", "test")] == {
        "from": "review", "to": "test", "label": NEXT, "loop": False, "max_rounds": None
    }  # fmt: skip
    assert by_pair[("implement", "more_rounds")]["label"] == ON_MAX_ROUNDS
    # The gate's only route is conditional: when it does not hold the flow goes on, `else`.
    assert by_pair[("more_rounds", "test")]["label"] == ELSE
    assert by_pair[("more_rounds", "implement")]["loop"] is True
    assert by_pair[("test", END)]["label"] == NEXT


def test_a_step_that_loops_on_itself_is_a_loop_edge() -> None:
    definition = FlowDefinition.model_validate({
        "id": "poll", "steps": [
            {"id": "check", "kind": "run", "agent": "a", "max_rounds": 5,
             "next": [{"when": "check.again", "to": "check"}, {"to": "end"}]},
        ],
    })  # fmt: skip
    drawn = edges(definition)
    assert {"from": "check", "to": "check", "label": "check.again", "loop": True,
            "max_rounds": 5} in drawn  # fmt: skip
    assert {"from": "check", "to": END, "label": NEXT, "loop": False, "max_rounds": None} in drawn


def view(steps: list[dict[str, Any]]) -> FlowRunView:
    return FlowRunView.model_validate({
        "flow_run_id": "fr-1", "flow": "feature", "revision": 1,
        "status": FlowStatus.WAITING, "steps": steps,
    })  # fmt: skip


def test_a_flow_runs_steps_carry_their_state_round_and_runs() -> None:
    run = view([
        {"step": "plan", "kind": "run", "round": 1, "status": StepStatus.SUCCEEDED,
         "run_id": "fr-1-plan-r1"},
        {"step": "implement", "kind": "run", "round": 1, "status": StepStatus.SUCCEEDED,
         "run_id": "fr-1-implement-r1"},
        {"step": "implement", "kind": "run", "round": 2, "status": StepStatus.RUNNING,
         "run_id": "fr-1-implement-r2"},
        {"step": "more_rounds", "kind": "gate", "round": 1, "status": StepStatus.WAITING,
         "approval_id": "gate-more_rounds-r1"},
    ])  # fmt: skip
    nodes = {n["id"]: n for n in json.loads(graph_of(feature(), run).to_json())["nodes"]}
    assert nodes["plan"]["state"] == StepStatus.SUCCEEDED
    assert nodes["plan"]["classes"] == f"{StepStatus.SUCCEEDED} done"
    assert nodes["implement"]["state"] == StepStatus.RUNNING
    assert nodes["implement"]["classes"] == StepStatus.RUNNING
    assert nodes["implement"]["round"] == 2
    assert nodes["implement"]["run_ids"] == ["fr-1-implement-r1", "fr-1-implement-r2"]
    assert nodes["review"]["state"] == PENDING
    assert nodes["review"]["round"] is None
    gate = nodes["more_rounds"]
    assert gate["state"] == StepStatus.WAITING
    assert gate["run_ids"] == []
    # The gate's run id is derived as the flows service derives it when the view has none.
    assert gate["gate"] == {
        "approval_id": "gate-more_rounds-r1", "gate_run_id": "fr-1-more_rounds-r1", "summary": ""
    }  # fmt: skip


def test_a_map_steps_state_is_its_own_record_else_its_liveliest_item() -> None:
    definition = FlowDefinition.model_validate({
        "id": "fan", "steps": [{"id": "each", "kind": "map", "agent": "a", "over": "[1, 2]"}],
    })  # fmt: skip
    items = [
        {"step": "each", "kind": "map", "round": 1, "item": 0, "status": StepStatus.SUCCEEDED},
        {"step": "each", "kind": "map", "round": 1, "item": 1, "status": StepStatus.RUNNING},
    ]  # fmt: skip
    nodes = {n.id: n for n in graph_of(definition, view(items)).nodes}
    assert nodes["each"].state == StepStatus.RUNNING
    own = {"step": "each", "kind": "map", "round": 1, "status": StepStatus.FAILED}
    nodes = {n.id: n for n in graph_of(definition, view([*items, own])).nodes}
    assert nodes["each"].state == StepStatus.FAILED
