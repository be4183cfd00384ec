"""The shape checks of a flow definition: ids unique, routes lead somewhere, loops bounded.

A step's successors are its routes' targets plus the step after it in the list (what follows
when no route matches). Every cycle of that graph must hold a step with `max_rounds`, or a
flow run could loop forever; each error names the step and the field.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

# A route to `end` completes the flow; defined here, beside the graph that leaves it out, so
# this module needs nothing of `events.flows` (which imports it to check each definition).
END = "end"


class _Route(Protocol):
    @property
    def to(self) -> str: ...
    @property
    def when(self) -> str | None: ...


class _Step(Protocol):
    @property
    def id(self) -> str: ...
    @property
    def kind(self) -> str: ...
    @property
    def next(self) -> Sequence[_Route]: ...
    @property
    def max_rounds(self) -> int | None: ...
    @property
    def on_max_rounds(self) -> str | None: ...


class FlowGraph(Protocol):
    """What the checks read of a flow definition (`events.flows.FlowDefinition` is one)."""

    @property
    def steps(self) -> Sequence[_Step]: ...
    def step(self, step_id: str) -> _Step: ...


def successors(definition: FlowGraph) -> dict[str, list[str]]:
    """Step id -> the step ids it may go to next (`end` left out)."""
    steps = definition.steps
    out: dict[str, list[str]] = {}
    for i, step in enumerate(steps):
        targets = [r.to for r in step.next if r.to != END]
        unconditional = any(r.when is None for r in step.next)
        if not unconditional and i + 1 < len(steps):
            targets.append(steps[i + 1].id)
        if step.on_max_rounds is not None:
            targets.append(step.on_max_rounds)
        out[step.id] = list(dict.fromkeys(targets))
    return out


def check_graph(definition: FlowGraph) -> None:
    """Raise ValueError naming the step and field of the first thing wrong."""
    ids = [s.id for s in definition.steps]
    dupes = sorted({i for i in ids if ids.count(i) > 1})
    if dupes:
        raise ValueError(f"steps: duplicate step id(s): {', '.join(dupes)}")
    known = set(ids)
    for step in definition.steps:
        for n, route in enumerate(step.next):
            if route.to != END and route.to not in known:
                raise ValueError(f"step {step.id!r}: next[{n}].to: no step {route.to!r}")
        if step.on_max_rounds is not None:
            target = step.on_max_rounds
            if target not in known:
                raise ValueError(f"step {step.id!r}: on_max_rounds: no step {target!r}")
            if definition.step(target).kind != "gate":
                raise ValueError(f"step {step.id!r}: on_max_rounds: {target!r} is not a gate")
            if step.max_rounds is None:
                raise ValueError(f"step {step.id!r}: on_max_rounds needs max_rounds")
    for component in _cycles(successors(definition)):
        bounded = [s for s in component if definition.step(s).max_rounds is not None]
        if not bounded:
            names = " -> ".join(component)
            raise ValueError(
                f"step {component[0]!r}: a loop without max_rounds ({names}); give one of"
                " its steps max_rounds"
            )


def _cycles(graph: dict[str, list[str]]) -> list[list[str]]:
    """Strongly connected components that hold a cycle (Tarjan), each in step order."""
    order = {name: i for i, name in enumerate(graph)}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, []):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component: list[str] = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1 or v in graph.get(v, []):
                found.append(sorted(component, key=order.__getitem__))

    for v in graph:
        if v not in index:
            visit(v)
    return found
