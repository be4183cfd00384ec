"""Plan mode (docs/guardrails.md): a run that starts in it is offered only read tools and
`exit_plan_mode`; the plan it submits goes through the ordinary approvals, and only once a
person approves it are the run's other granted tools offered. A denied (or expired) plan ends
the run, completed, with the plan as its result.

This module holds the state and the texts; the loop (`nexus_runner.loop`) asks the approval
and the registry (`ToolRegistry.specs(read_only=True)`) filters what is offered.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from typing import Any, Literal

from nexus_events.events.runs import RunResult
from pydantic import BaseModel, ConfigDict, Field, ValidationError

# Not nexus_runner.tools: the registry imports READ_TOOLS from here.
from nexus_runner.safety import redact, truncate

EXIT_PLAN_MODE = "exit_plan_mode"
# The built-in that reads an on-demand skill (nexus_runner.prompt lists them): named here,
# beside the other read tools, since the registry and the prompt both import this module.
READ_SKILL = "read_skill"
# Built-in tools that only read the workspace (never run a command or write): all that plan
# mode offers of the granted built-ins. run_shell is not here even for "read-only" commands:
# a shell can write, so plan mode never offers it.
# `read_skill` reads one of the run's on-demand skills: no workspace at all.
READ_TOOLS = frozenset(
    {"read_file", "list_files", "search_files", "git_status", "git_diff", READ_SKILL}
)
# Longest plan accepted; a plan is a few screens, not a document dump.
MAX_PLAN_CHARS = 20_000
# How much of the plan the approval request carries as its summary: what a chat message or a
# Plane comment shows (Telegram caps a message at 4096 characters, the prompt text included).
APPROVAL_SUMMARY_CHARS = 3_000

Verdict = Literal["approved", "denied", "expired"]

PLAN_NOTE = (
    "You start in plan mode: only tools that read are available. Study the task and the"
    f" code, then call `{EXIT_PLAN_MODE}` with your plan. A person reviews it: once it is"
    " approved, all your other tools are offered; if it is not, the run ends with your plan"
    " as its result."
)


class ExitPlanModeArgs(BaseModel):
    """Submit your plan for a person's approval and leave plan mode. Approved: all your tools
    are offered from the next turn. Denied: the run ends with the plan as its result."""

    model_config = ConfigDict(frozen=True, extra="forbid")  # as the built-ins' ToolArgs

    plan: str = Field(
        ...,
        min_length=1,
        max_length=MAX_PLAN_CHARS,
        description="The plan: what you will change and how, as numbered steps.",
    )


def exit_plan_mode_spec() -> dict[str, Any]:
    """`exit_plan_mode` in the chat-completions ``tools`` format."""
    schema = ExitPlanModeArgs.model_json_schema()
    schema.pop("title", None)
    return {
        "type": "function",
        "function": {
            "name": EXIT_PLAN_MODE,
            "description": (ExitPlanModeArgs.__doc__ or EXIT_PLAN_MODE).strip(),
            "parameters": schema,
        },
    }


def lenient_arguments(arguments: str) -> dict[str, Any]:
    """A refused call's arguments as recorded (the call is refused whatever they are)."""
    try:
        raw = json.loads(arguments) if arguments.strip() else {}
    except json.JSONDecodeError:
        return {"arguments": arguments}
    return raw if isinstance(raw, dict) else {"arguments": arguments}


def invalid_plan(raw: dict[str, Any]) -> str | None:
    """Why these `exit_plan_mode` arguments are not a plan (the model reads it), or None."""
    try:
        ExitPlanModeArgs.model_validate(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(map(str, first["loc"])) or "arguments"
        return f"invalid arguments: {where}: {first['msg']}"
    return None


def refusal(tool: str) -> str:
    """What the model reads when it calls a tool plan mode does not offer."""
    return (
        f"plan mode: {tool!r} is not available until your plan is approved; only tools that"
        f" read are. Call `{EXIT_PLAN_MODE}` with your plan to ask for approval."
    )


@dataclass(frozen=True)
class PlanVerdict:
    """How a submitted plan was answered."""

    plan: str
    decision: Verdict
    approval_id: str
    decided_by: str | None = None
    comment: str | None = None
    surface: str | None = None

    def as_dict(self) -> dict[str, Any]:
        """How it was answered, as a result's ``details.plan`` (the plan is the summary)."""
        answer = dataclasses.asdict(self)
        del answer["plan"]
        return {"approved": self.decision == "approved", **answer}


class PlanMode:
    """One run's plan-mode state. Active from the start when the config asks for it; an
    approved plan lifts it at the next turn (calls later in the same turn were chosen before
    the approval, so they are still judged in plan mode); a plan not approved ends the run."""

    def __init__(self, active: bool) -> None:
        self.active = active
        self.submitted: list[PlanVerdict] = []
        self._lift = False

    def specs(self) -> list[dict[str, Any]]:
        """The tools plan mode adds to the read tools: `exit_plan_mode` while active."""
        return [exit_plan_mode_spec()] if self.active else []

    def record(self, verdict: PlanVerdict) -> None:
        self.submitted.append(verdict)
        if verdict.decision == "approved":
            self._lift = True

    def next_turn(self) -> None:
        if self._lift:
            self.active, self._lift = False, False

    @property
    def ended(self) -> PlanVerdict | None:
        """The verdict that ends the run (a plan denied or expired), if any."""
        last = self.submitted[-1] if self.submitted else None
        return last if last is not None and last.decision != "approved" else None


def approval_summary(plan: str) -> str:
    """The approval request's summary: the plan, redacted and cut to what a message shows."""
    return truncate(redact(plan), APPROVAL_SUMMARY_CHARS)[0]


def approved_output(verdict: PlanVerdict, tools: list[str]) -> str:
    """The `exit_plan_mode` result the model reads once its plan is approved."""
    who = f" by {verdict.decided_by}" if verdict.decided_by else ""
    note = f" Note from the approver: {verdict.comment}" if verdict.comment else ""
    return (
        f"Plan approved{who}. You are out of plan mode: from your next turn all your tools are"
        f" offered ({', '.join(tools)}). Carry out the plan, then call `finish`.{note}"
    )


def not_approved_output(verdict: PlanVerdict) -> str:
    who = f" by {verdict.decided_by}" if verdict.decided_by else ""
    note = f" ({verdict.comment})" if verdict.comment else ""
    return f"plan {verdict.decision}{who}{note}: the run ends with your plan as its result"


def plan_result(verdict: PlanVerdict) -> RunResult:
    """The result of a run whose plan was not approved: the plan is the summary, and
    ``details.plan`` says how it was answered. Nothing was changed, committed or pushed."""
    return RunResult(
        summary=redact(verdict.plan),
        details={"plan": verdict.as_dict()},
        pushed=False,
    )


def not_approved_message(verdict: PlanVerdict) -> str:
    """The completed event's message for a plan not approved."""
    who = f" by {verdict.decided_by}" if verdict.decided_by else ""
    return f"plan {verdict.decision}{who}; the plan is the result"
