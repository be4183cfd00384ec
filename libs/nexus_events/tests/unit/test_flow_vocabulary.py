"""The flow vocabulary is spelled once: `FlowEvent` names every registered flow-run event,
`StepStatus` every step status, and `flowgraph` stands alone (no import cycle with
`events.flows`)."""

from __future__ import annotations

import ast
import inspect
import typing

from nexus_events.contract import flowgraph
from nexus_events.contract.subjects import Family
from nexus_events.events import flows
from nexus_events.events.base import registered
from nexus_events.events.flows import (
    STEP_ENDED,
    FlowEvent,
    FlowStepFinished,
    StepStatus,
)


def test_flow_event_names_every_registered_flow_event() -> None:
    names = {name for family, name in registered() if family == Family.FLOW}
    assert names == {e.value for e in FlowEvent}


def test_a_finished_step_ends_in_one_of_the_ended_statuses() -> None:
    annotation = FlowStepFinished.model_fields["status"].annotation
    assert set(typing.get_args(annotation)) == STEP_ENDED
    assert set(StepStatus) > STEP_ENDED


def _imported_modules(module: object) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(inspect.getsource(module))):  # type: ignore[arg-type]
        if isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return found


def test_flowgraph_imports_nothing_of_the_flow_events() -> None:
    assert not {m for m in _imported_modules(flowgraph) if m.startswith("nexus_events")}
    # One direction only: events.flows imports the graph checks at the top, never lazily.
    nested = [
        node
        for function in ast.walk(ast.parse(inspect.getsource(flows)))
        if isinstance(function, ast.FunctionDef)
        for node in ast.walk(function)
        if isinstance(node, ast.Import | ast.ImportFrom)
    ]
    assert not [ast.unparse(n) for n in nested if "flowgraph" in ast.unparse(n)]
    assert flows.flowgraph is flowgraph
    assert flows.END == flowgraph.END
