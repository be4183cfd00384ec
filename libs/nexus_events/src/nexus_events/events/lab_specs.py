"""The lab's plain models (docs/lab.md): how a run replays or forks a recorded run, which arm
of an agent's canary a run was assembled with, and the canary policy an agent names.

Plain models only: run requests, run configs and agent definitions carry them, and the lab's
events (`nexus_events.events.lab`, `nexus_events.events.evals`) refer to them.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Literal

from pydantic import Field, field_validator, model_validator

from nexus_events.contract.subjects import validate_token
from nexus_events.events.specs import Spec


class LabMode(StrEnum):
    """How a lab run uses its source run."""

    # The same task on the same starting commit, served the recorded model replies while
    # the new requests match the recorded ones.
    REPLAY = "replay"
    # The source's transcript up to a turn and its workspace at that turn, then live.
    FORK = "fork"


class OnDivergence(StrEnum):
    """What a replay does at its first divergence from the recording."""

    STOP = "stop"  # end the run (completed, reason `diverged`)
    LIVE = "live"  # go on with the live model


class DivergenceKind(StrEnum):
    """What differed first between a replay's model request and the recorded one."""

    SYSTEM_PROMPT = "system_prompt"
    SKILLS = "skills"  # the skills' part of the system message
    TOOLS = "tools"  # the tools offered to the model
    MESSAGE = "message"  # a message of the conversation (the task, an inbox message, ...)
    TOOL_RESULT = "tool_result"  # a tool's result the model is shown
    MODEL = "model"  # the model or its sampling parameters
    RECORDING_ENDED = "recording_ended"  # the replay asks a turn the source never made


class LabSpec(Spec):
    """What a lab run is made of (docs/lab.md). A replay: `source_run_id` and
    `on_divergence`; a fork: `source_run_id`, `at_turn` and optionally `input`."""

    mode: LabMode = Field(..., description="replay or fork.")
    source_run_id: str = Field(..., description="The recorded run it replays or forks.")
    on_divergence: OnDivergence = Field(
        OnDivergence.STOP,
        description="replay: stop at the first divergence, or go on with the live model.",
    )
    at_turn: int | None = Field(
        None,
        ge=1,
        description="fork: the source's turns 1..at_turn are kept (transcript and workspace);"
        " the fork goes on from turn at_turn + 1.",
    )
    input: str | None = Field(
        None, description="fork: a message for the agent, added after turn at_turn."
    )

    @field_validator("source_run_id")
    @classmethod
    def _token(cls, value: str) -> str:
        return validate_token(value, "source run id")

    @model_validator(mode="after")
    def _mode_fields(self) -> LabSpec:
        if self.mode is LabMode.FORK and self.at_turn is None:
            raise ValueError("a fork needs at_turn")
        if self.mode is LabMode.REPLAY and (self.at_turn is not None or self.input is not None):
            raise ValueError("a replay takes no at_turn or input (fork does)")
        return self


class CanaryRule(Spec):
    """One side of a canary policy, judged on the outcomes of each arm's finished runs: each
    condition given is a limit the candidate must stay within.

    `promote_when` holds when the candidate is within every limit it gives; `rollback_when`
    when the candidate breaks any limit it gives (once each arm has `min_runs`)."""

    min_runs: int = Field(
        10, ge=1, description="Finished runs each arm needs before this rule is judged."
    )
    min_success_rate: float | None = Field(
        None, ge=0, le=1, description="The candidate's success rate is at least this."
    )
    max_success_drop: float | None = Field(
        None,
        ge=0,
        le=1,
        description="The candidate's success rate is at most this below the current's.",
    )
    max_cost_ratio: float | None = Field(
        None,
        gt=0,
        description="The candidate's mean cost per run is at most this times the current's.",
    )


class CanarySpec(Spec):
    """An agent's canary (docs/lab.md): `share` of its real runs are assembled with
    `revision`, and the policy promotes or rolls back on their outcomes."""

    revision: int = Field(..., ge=1, description="The candidate revision of this agent.")
    share: float = Field(
        ..., gt=0, le=1, description="The share of runs assembled with the candidate, (0, 1]."
    )
    promote_when: CanaryRule = Field(
        default_factory=lambda: CanaryRule(max_success_drop=0.0),
        description="When the candidate becomes the agent (a new revision of its definition).",
    )
    rollback_when: CanaryRule = Field(
        default_factory=lambda: CanaryRule(min_runs=5, max_success_drop=0.2),
        description="When the canary ends and the agent stays as it is (a new revision without"
        " the canary).",
    )


class CanaryArm(Spec):
    """Which arm of its agent's canary a run was assembled with (recorded in `prepared`)."""

    arm: Literal["candidate", "current"] = Field(..., description="The arm chosen.")
    candidate_revision: int = Field(..., ge=1, description="The canary's candidate revision.")
    current_revision: int = Field(..., ge=1, description="The agent's revision with the canary.")
    share: float = Field(..., gt=0, le=1, description="The candidate's share.")


__all__ = [
    "CanaryArm",
    "CanaryRule",
    "CanarySpec",
    "DivergenceKind",
    "LabMode",
    "LabSpec",
    "OnDivergence",
]
