"""A flow definition (and, for a flow run, where each of its steps is) as the nodes and edges
the browser lays out with dagre: JSON for static/flowgraph.js."""

from __future__ import annotations

from typing import Literal

from nexus_events.contract.flowgraph import END
from nexus_events.events.flows import (
    STEP_ENDED,
    FlowDefinition,
    FlowRunView,
    FlowStepView,
    GateStep,
    MapStep,
    RunStep,
    StepStatus,
    step_run_id,
)
from pydantic import BaseModel, Field

# The start node's id: step ids begin with a letter, so this one never names a step; the
# end node is the contract's own `end` (which no step may be called either).
START = "__start__"
# A step of a flow run not entered yet: not a StepStatus (the contract has no word for it).
PENDING = "pending"
# The label of the route taken when no route matched (or a step has none).
NEXT = "next"
ELSE = "else"
ON_MAX_ROUNDS = "max_rounds"

NodeKind = Literal["run", "map", "gate", "wait", "start", "end"]


class GateWait(BaseModel):
    """A gate waiting for a person: where its approve/deny form posts."""

    approval_id: str
    gate_run_id: str
    summary: str = ""


class GraphNode(BaseModel):
    id: str
    kind: NodeKind
    label: str
    agent: str | None = None
    description: str = ""
    max_rounds: int | None = None
    # A flow run's: the step's state (a StepStatus, or `pending`), its latest round and the
    # run ids of every round and item, oldest first.
    state: str | None = None
    round: int | None = None
    run_ids: list[str] = Field(default_factory=list)
    gate: GateWait | None = None
    # The node's CSS classes for its state (`state_classes`).
    classes: str = ""


class GraphEdge(BaseModel):
    source: str = Field(..., serialization_alias="from")
    target: str = Field(..., serialization_alias="to")
    label: str
    # A route back to an earlier step (or to itself): a loop, bounded by `max_rounds` (the
    # entered step's, else the leaving step's: the graph check makes one of a cycle's hold it).
    loop: bool = False
    max_rounds: int | None = None


class FlowGraphView(BaseModel):
    flow: str
    start: str = START
    end: str = END
    nodes: list[GraphNode]
    edges: list[GraphEdge]

    def to_json(self) -> str:
        return self.model_dump_json(by_alias=True)


def _edges(definition: FlowDefinition) -> list[GraphEdge]:
    steps = definition.steps
    order = {s.id: i for i, s in enumerate(steps)}
    edges = [GraphEdge(source=START, target=steps[0].id, label=NEXT)]

    def edge(i: int, target: str, label: str) -> GraphEdge:
        j = order.get(target)
        loop = j is not None and j <= i
        bound = None
        if loop:
            bound = definition.step(target).max_rounds or steps[i].max_rounds
        return GraphEdge(
            source=steps[i].id, target=target, label=label, loop=loop, max_rounds=bound
        )

    for i, step in enumerate(steps):
        for route in step.next:
            edges.append(edge(i, route.to, route.when or NEXT))
        if not any(route.when is None for route in step.next):
            after = steps[i + 1].id if i + 1 < len(steps) else END
            edges.append(edge(i, after, ELSE if step.next else NEXT))
        if step.on_max_rounds is not None:
            edges.append(edge(i, step.on_max_rounds, ON_MAX_ROUNDS))
    return edges


def _state(records: list[FlowStepView]) -> tuple[str, int]:
    """A step's state and round from its records: the latest round's, a map step's own record
    (no item) when it has one, else the liveliest of its items."""
    latest = max(r.round for r in records)
    current = [r for r in records if r.round == latest]
    own = [r for r in current if r.item is None]
    if own:
        return own[-1].status, latest
    statuses = {r.status for r in current}
    for live in (StepStatus.RUNNING, StepStatus.WAITING, StepStatus.FAILED):
        if live in statuses:
            return live, latest
    return current[-1].status, latest


def graph_of(definition: FlowDefinition, run: FlowRunView | None = None) -> FlowGraphView:
    """The nodes and edges of `definition`; with `run`, each step's state, round and runs."""
    by_step: dict[str, list[FlowStepView]] = {}
    for record in run.steps if run is not None else []:
        by_step.setdefault(record.step, []).append(record)
    nodes = [GraphNode(id=START, kind="start", label="start")]
    for step in definition.steps:
        node = GraphNode(
            id=step.id,
            kind=step.kind,
            label=step.id,
            agent=step.agent if isinstance(step, RunStep | MapStep) else None,
            description=step.description,
            max_rounds=step.max_rounds,
        )
        if run is not None:
            records = by_step.get(step.id, [])
            node.state, node.round = _state(records) if records else (PENDING, None)
            node.classes = state_classes(node.state)
            node.run_ids = [r.run_id for r in records if r.run_id and step.kind != "gate"]
            waiting = [r for r in records if r.status == StepStatus.WAITING and r.approval_id]
            if isinstance(step, GateStep) and waiting:
                last = waiting[-1]
                gate_run_id = last.run_id or step_run_id(run.flow_run_id, step.id, last.round)
                node.gate = GateWait(approval_id=last.approval_id or "", gate_run_id=gate_run_id)
        nodes.append(node)
    nodes.append(GraphNode(id=END, kind="end", label="end"))
    return FlowGraphView(flow=definition.id, nodes=nodes, edges=_edges(definition))


def state_classes(state: str | None) -> str:
    """The CSS classes of a node in `state`: the state itself, and `done` for any ended one
    (the browser test waits for `[data-step=X].done`)."""
    if state is None:
        return ""
    return f"{state} done" if state in STEP_ENDED else state
