"""Catalog events (``nexus.catalog.v1.<agent|skill>.<id>.<event>``) and the definitions they carry.

Agent definitions and skills are written by operators and kept in git; core validates them
field by field before anything is published, and stores every applied revision.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any, ClassVar

from pydantic import Field, field_validator

from nexus_events.contract.subjects import Family, validate_token
from nexus_events.events.base import Command, register
from nexus_events.events.egress import EgressGrant, unique_grants
from nexus_events.events.lab_specs import CanarySpec
from nexus_events.events.specs import (
    Budgets,
    Hooks,
    McpServerSpec,
    ModelSpec,
    Permissions,
    ResumePolicy,
    RuntimeSpec,
    SandboxTool,
    SkillRef,
    Spec,
    ToolGrant,
    unique_sandbox_tools,
)


class Role(StrEnum):
    PLANNER = "planner"
    IMPLEMENTER = "implementer"
    REVIEWER = "reviewer"
    TESTER = "tester"
    DEVOPS = "devops"
    CUSTOM = "custom"


class AgentDefinition(Spec):
    id: str = Field(..., description="Agent id, a subject token.")
    role: Role = Field(..., description="What kind of agent this is.")
    description: str = Field("", description="What the agent is for.")
    model: ModelSpec = Field(..., description="The LLM it uses.")
    system_prompt: str = Field(..., min_length=1, description="Its system prompt.")
    skills: list[SkillRef] = Field(default_factory=list, description="Skills it loads.")
    tools: list[ToolGrant] = Field(default_factory=list, description="Tools granted.")
    permissions: Permissions = Field(default_factory=Permissions, description="What it may do.")
    mcp_servers: list[McpServerSpec] = Field(
        default_factory=list, description="MCP servers whose granted tools it may use."
    )
    budgets: Budgets = Field(default_factory=Budgets, description="Run limits.")
    runtime: RuntimeSpec = Field(default_factory=RuntimeSpec, description="Isolation resources.")
    max_concurrent_runs: int | None = Field(
        None, gt=0, description="Admission limit for this agent; None = scheduler default."
    )
    plan_mode: bool = Field(
        False,
        description="Start its runs in plan mode: only read tools until the plan it submits"
        " with exit_plan_mode is approved (docs/guardrails.md); a run request may override it.",
    )
    hooks: Hooks = Field(
        default_factory=Hooks, description="Policy hooks on tool calls (docs/guardrails.md)."
    )
    output_schema: dict[str, Any] | None = Field(
        None,
        description="JSON Schema its finish.details must fit: the runner asks the model again"
        " a bounded number of times, then fails the run with reason invalid_output.",
    )
    resume: ResumePolicy = Field(
        default_factory=ResumePolicy,
        description="Resuming a run whose runner died: attempts (docs/resume.md).",
    )
    sandbox_tools: list[SandboxTool] = Field(
        default_factory=list,
        description="Tools defined in JavaScript, run sandboxed with capability tokens"
        " (docs/sandbox.md).",
    )
    egress: list[EgressGrant] = Field(
        default_factory=list,
        description="Where its tools may reach on the network, through the runner's proxy"
        " (docs/sandbox.md, Egress grants); none = no network.",
    )
    canary: CanarySpec | None = Field(
        None,
        description="A candidate revision given a share of real runs, promoted or rolled back"
        " on their outcomes (docs/lab.md).",
    )
    team: str | None = Field(
        None,
        description="The team its runs count against when neither the request, the task nor"
        " the flow names one (docs/spend.md).",
    )

    @field_validator("id")
    @classmethod
    def _token(cls, value: str) -> str:
        return validate_token(value, "agent id")

    @field_validator("team")
    @classmethod
    def _team(cls, value: str | None) -> str | None:
        return None if value is None else validate_token(value, "team")

    @field_validator("mcp_servers")
    @classmethod
    def _unique_servers(cls, value: list[McpServerSpec]) -> list[McpServerSpec]:
        names = [s.name for s in value]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"duplicate MCP server name(s): {', '.join(dupes)}")
        return value

    @field_validator("sandbox_tools")
    @classmethod
    def _unique_sandbox_tools(cls, value: list[SandboxTool]) -> list[SandboxTool]:
        return unique_sandbox_tools(value)

    _unique_egress = field_validator("egress")(classmethod(lambda cls, v: unique_grants(v)))


class SkillDefinition(Spec):
    name: str = Field(..., description="Skill name, a subject token.")
    version: str = Field(..., min_length=1, description="Version label, e.g. 1.2.0.")
    description: str = Field("", description="One line on what the skill teaches.")
    content: str = Field(..., description="The markdown body given to the model.")
    metadata: dict[str, Any] = Field(default_factory=dict, description="Other front matter.")
    hooks: Hooks = Field(
        default_factory=Hooks, description="Policy hooks added to every agent using the skill."
    )
    sandbox_tools: list[SandboxTool] = Field(
        default_factory=list,
        description="Sandboxed JavaScript tools added to every agent using the skill"
        " (docs/sandbox.md).",
    )
    egress: list[EgressGrant] = Field(
        default_factory=list,
        description="Egress grants added to every agent using the skill (docs/sandbox.md).",
    )

    @field_validator("sandbox_tools")
    @classmethod
    def _unique_sandbox_tools(cls, value: list[SandboxTool]) -> list[SandboxTool]:
        return unique_sandbox_tools(value)

    _unique_egress = field_validator("egress")(classmethod(lambda cls, v: unique_grants(v)))

    @field_validator("name")
    @classmethod
    def _token(cls, value: str) -> str:
        return validate_token(value, "skill name")


class _CatalogCommand(Command):
    event_family: ClassVar[Family] = Family.CATALOG


@register
class AgentApplied(_CatalogCommand):
    event_name: ClassVar[str] = "agent.applied"

    definition: AgentDefinition = Field(..., description="The whole definition.")
    applied_by: str | None = Field(None, description="Who applied it.")


@register
class AgentDeleted(_CatalogCommand):
    event_name: ClassVar[str] = "agent.deleted"

    deleted_by: str | None = Field(None, description="Who deleted it.")


@register
class SkillApplied(_CatalogCommand):
    event_name: ClassVar[str] = "skill.applied"

    skill: SkillDefinition = Field(..., description="The whole skill.")
    applied_by: str | None = Field(None, description="Who applied it.")


@register
class SkillDeleted(_CatalogCommand):
    event_name: ClassVar[str] = "skill.deleted"

    deleted_by: str | None = Field(None, description="Who deleted it.")
