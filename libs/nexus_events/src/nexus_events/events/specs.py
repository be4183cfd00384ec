"""Specs shared by agent definitions and run configs: model, permissions, budgets, runtime, repo.

Operators write these by hand (YAML in git), so they reject unknown fields: a misspelt
``can_comit`` is an error, not a silently ignored permission.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from nexus_events.subjects import validate_token


class Spec(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class ModelSpec(Spec):
    provider: str = Field("openai", description="Provider label (openai, vllm, ollama, ...).")
    name: str = Field(..., min_length=1, description="Model name sent to the chat API.")
    base_url: str | None = Field(
        None, description="OpenAI-compatible API base URL; None uses the runner's default."
    )
    temperature: float = Field(0.2, ge=0, le=2, description="Sampling temperature.")
    max_output_tokens: int = Field(4096, gt=0, description="Upper bound of tokens per reply.")


class Permissions(Spec):
    can_commit: bool = Field(False, description="The runner may create commits.")
    can_push: bool = Field(False, description="The runner may push its branch.")
    can_open_pr: bool = Field(False, description="The runner may open a pull request.")
    can_merge: bool = Field(False, description="The runner may merge a pull request.")
    approval_required_tools: list[str] = Field(
        default_factory=list, description="Tools whose every call waits for a human approval."
    )
    network_egress: list[str] = Field(
        default_factory=list, description="Hosts the run may reach besides NATS and the LLM."
    )


class Budgets(Spec):
    max_turns: int = Field(40, gt=0, description="Most LLM turns in one run.")
    max_tokens: int = Field(400_000, gt=0, description="Most tokens (in + out) in one run.")
    max_cost_usd: float = Field(5.0, ge=0, description="Most spend in USD in one run.")
    max_wall_seconds: int = Field(3600, gt=0, description="Most wall-clock seconds in one run.")


class RuntimeSpec(Spec):
    image: str | None = Field(None, description="Runner image (Kubernetes runtime).")
    cpu: str = Field("1", description="CPU request/limit, Kubernetes quantity.")
    memory: str = Field("2Gi", description="Memory request/limit, Kubernetes quantity.")
    timeout_seconds: int | None = Field(
        None, gt=0, description="Hard deadline of the Job; defaults to budgets.max_wall_seconds."
    )


class ToolGrant(Spec):
    name: str = Field(..., min_length=1, description="Tool name, e.g. run_shell.")
    options: dict[str, Any] = Field(default_factory=dict, description="Tool-specific options.")

    @model_validator(mode="before")
    @classmethod
    def _from_name(cls, value: Any) -> Any:
        # `tools: [read_file, run_shell]` is the common way to write a grant.
        return {"name": value} if isinstance(value, str) else value


class SkillRef(Spec):
    name: str = Field(..., description="Skill name.")
    version: str | None = Field(None, description="Pinned version; None means the latest.")

    @model_validator(mode="before")
    @classmethod
    def _from_string(cls, value: Any) -> Any:
        # `skills: [python, git@2]` pins with `@`.
        if isinstance(value, str):
            name, _, version = value.partition("@")
            return {"name": name, "version": version or None}
        return value

    @field_validator("name")
    @classmethod
    def _token(cls, value: str) -> str:
        return validate_token(value, "skill name")


class RepoSpec(Spec):
    url: str = Field(..., min_length=1, description="Git URL (https, ssh) or a local path.")
    ref: str | None = Field(None, description="Base branch, tag or commit; None = default branch.")
    branch: str | None = Field(None, description="Work branch; None = nexus/<run_id>.")

    @model_validator(mode="before")
    @classmethod
    def _from_url(cls, value: Any) -> Any:
        return {"url": value} if isinstance(value, str) else value
