"""What a flow's conditions and templates see (`context`) and evaluating them over it; an
expression that fails is a `Failure` of the step (reason `expression_error`)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from nexus_events.contract.expressions import ExpressionError, compile_expression, compile_template
from nexus_events.events.flows import FlowDefinition, FlowReason

from nexus_flows.records import FlowState

INPUT_LIMIT = 4_000  # a step_started's rendered input is cut to this (the contract's bound)


@dataclass(frozen=True)
class Failure(Exception):  # noqa: N818 - a decision, raised to unwind the step being decided
    reason: str
    message: str
    step: str | None


@lru_cache(maxsize=1024)
def _expr(text: str) -> Any:
    return compile_expression(text)


@lru_cache(maxsize=1024)
def _tmpl(text: str) -> Any:
    return compile_template(text)


_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@lru_cache(maxsize=1024)
def _words(text: str) -> frozenset[str]:
    return frozenset(_WORD.findall(text))


def _read_by(text: str, ctx: dict[str, Any]) -> dict[str, Any]:
    """The part of `ctx` that `text` can read: the names among its words (a superset of the
    names it reads). Evaluating converts its whole context to CEL values, which was most of
    a render's time (a burst's profile) for a template reading one name of a dozen."""
    words = _words(text)
    return {name: value for name, value in ctx.items() if name in words}


def context(
    state: FlowState, definition: FlowDefinition, item: Any = None, index: int | None = None
) -> dict[str, Any]:
    """What conditions and templates see (the flows.py module docstring describes it)."""
    repo = state.repo or definition.repo
    ctx: dict[str, Any] = {}
    steps: dict[str, Any] = {}
    for step in definition.steps:
        ctx[step.id] = state.outputs.get(step.id) or {}
        last = state.last.get(step.id)
        steps[step.id] = {} if last is None else last.model_dump(mode="json")
    # The built-in names come last: they win over a step that took one of their names.
    ctx.update(
        {
            "task": {
                "id": state.task_id or "",
                "input": state.input or "",
                "repo": (repo.url if repo else "") or "",
            },
            "input": state.input or "",
            "flow": {
                "id": state.flow,
                "run_id": state.flow_run_id,
                "revision": state.revision or 0,
            },
            "steps": steps,
        }
    )
    if index is not None:
        ctx["item"] = item
        ctx["index"] = index
    return ctx


def render(template: str, ctx: dict[str, Any], step: str) -> str:
    try:
        return str(_tmpl(template).render(_read_by(template, ctx)))
    except ExpressionError as exc:
        raise Failure(FlowReason.EXPRESSION_ERROR, f"step {step}: {exc}", step) from None


def holds(text: str, ctx: dict[str, Any], step: str) -> bool:
    try:
        return bool(_expr(text).test(_read_by(text, ctx)))
    except ExpressionError as exc:
        raise Failure(FlowReason.EXPRESSION_ERROR, f"step {step}: {exc}", step) from None


def evaluate(text: str, ctx: dict[str, Any], step: str) -> Any:
    try:
        return _expr(text).evaluate(_read_by(text, ctx))
    except ExpressionError as exc:
        raise Failure(FlowReason.EXPRESSION_ERROR, f"step {step}: {exc}", step) from None


__all__ = ["INPUT_LIMIT", "Failure", "context", "evaluate", "holds", "render"]
