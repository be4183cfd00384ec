"""The runner's spans (docs/design.md §11): the run, each model call, each tool call.

The run's root span ``nexus run <run_id>`` continues the trace the scheduler handed over
(``TRACEPARENT``, or the `prepared` event's headers with ``--run-id``); every event the run
publishes is inside its span tree, so the run is one trace from `requested` to its end.
Attribute names follow the OpenTelemetry GenAI conventions where they exist (``gen_ai.*``)
and core's ``nexus.*`` names otherwise.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from nexus_events.contract.spans import AGENT_ID, ATTEMPT, OUTCOME, REASON, RUN_ID, TASK_ID
from nexus_events.events.runs import RunConfig, RunSleeping, TerminalEvent
from nexus_events.runtime import telemetry
from opentelemetry import context as otel_context
from opentelemetry.trace import Span, SpanKind

# Shared names (RUN_ID, AGENT_ID, ...) come from nexus_events.contract.spans; these are the runner's
# own.
TURN = "nexus.turn"
COST_USD = "nexus.cost_usd"
LLM_ATTEMPTS = "nexus.llm.attempts"
APPROVAL = "nexus.approval.decision"
TOKENS_IN = "nexus.tokens_in"
TOKENS_OUT = "nexus.tokens_out"
TURNS = "nexus.turns"

GEN_AI_OPERATION = "gen_ai.operation.name"
GEN_AI_AGENT_ID = "gen_ai.agent.id"
REQUEST_MODEL = "gen_ai.request.model"
RESPONSE_MODEL = "gen_ai.response.model"
INPUT_TOKENS = "gen_ai.usage.input_tokens"
OUTPUT_TOKENS = "gen_ai.usage.output_tokens"
FINISH_REASONS = "gen_ai.response.finish_reasons"
TOOL_NAME = "gen_ai.tool.name"
TOOL_CALL_ID = "gen_ai.tool.call.id"

# Tool call outcomes (attribute `nexus.outcome` of a tool span).
TOOL_OK = "ok"
TOOL_REFUSED = "refused"
TOOL_ERROR = "error"


def run_span_name(run_id: str) -> str:
    return f"nexus run {run_id}"


def _base(config: RunConfig) -> dict[str, str | int]:
    attrs: dict[str, str | int] = {
        RUN_ID: config.run_id,
        AGENT_ID: config.agent_id,
        GEN_AI_AGENT_ID: config.agent_id,
    }
    if config.task_id:
        attrs[TASK_ID] = config.task_id
    return attrs


@contextlib.contextmanager
def run_span(config: RunConfig, parent: otel_context.Context | None) -> Iterator[Span]:
    """The run's root span; `parent` is the scheduler's context (None: the current one)."""
    attrs = {**_base(config), ATTEMPT: config.attempt, REQUEST_MODEL: config.model.name}
    with telemetry.tracer().start_as_current_span(
        run_span_name(config.run_id), context=parent, attributes=attrs
    ) as span:
        yield span


def record_terminal(span: Span, terminal: TerminalEvent | RunSleeping) -> None:
    """The run's outcome and totals on its root span (an attempt that slept: `sleeping`)."""
    span.set_attribute(OUTCOME, terminal.event_name)
    if isinstance(terminal, RunSleeping):
        return  # its reason is the agent's words, not a reason code
    reason = getattr(terminal, "reason", None)
    if reason is not None:
        span.set_attribute(REASON, str(reason))
    for attr, field in ((TOKENS_IN, "tokens_in"), (TOKENS_OUT, "tokens_out")):
        value = getattr(terminal, field, None)
        if isinstance(value, int):
            span.set_attribute(attr, value)
    cost = getattr(terminal, "cost_usd", None)
    if isinstance(cost, (int, float)):
        span.set_attribute(COST_USD, float(cost))


@contextlib.contextmanager
def llm_span(config: RunConfig, model: str, turn: int) -> Iterator[Span]:
    """One model turn (retries included): a CLIENT span ``chat <model>``."""
    attrs = {**_base(config), GEN_AI_OPERATION: "chat", REQUEST_MODEL: model, TURN: turn}
    with telemetry.tracer().start_as_current_span(
        f"chat {model}", kind=SpanKind.CLIENT, attributes=attrs
    ) as span:
        yield span


@contextlib.contextmanager
def tool_span(config: RunConfig, tool: str, call_id: str, turn: int) -> Iterator[Span]:
    """One tool call (judged, maybe approved, run): ``execute_tool <tool>``."""
    attrs = {
        **_base(config),
        GEN_AI_OPERATION: "execute_tool",
        TOOL_NAME: tool,
        TOOL_CALL_ID: call_id,
        TURN: turn,
    }
    with telemetry.tracer().start_as_current_span(f"execute_tool {tool}", attributes=attrs) as span:
        yield span
