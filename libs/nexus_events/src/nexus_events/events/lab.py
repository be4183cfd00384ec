"""The lab's run and catalog events (docs/lab.md): a replay's first divergence, a run marked
golden, and a canary's decision."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import BaseModel, Field

from nexus_events.contract.runstate import RunEvent
from nexus_events.contract.subjects import Family
from nexus_events.events.base import Command, Event, register
from nexus_events.events.lab_specs import DivergenceKind, OnDivergence

# How much of a differing message a `diverged` event shows of each side.
DIVERGENCE_EXCERPT = 2000


@register
class RunDiverged(Event):
    """A replay's model request differed from the recorded one for the first time."""

    event_family: ClassVar[Family] = Family.RUN
    event_name: ClassVar[str] = RunEvent.DIVERGED

    turn: int = Field(..., ge=1, description="The turn whose request differed.")
    kind: DivergenceKind = Field(..., description="What differed first.")
    index: int | None = Field(
        None, ge=0, description="The differing message's index in the request, if a message."
    )
    detail: str = Field(..., description="One line on what differed.")
    recorded: str = Field(
        "", description=f"The recorded side, cut to {DIVERGENCE_EXCERPT} characters."
    )
    actual: str = Field(
        "", description=f"The replay's side, cut to {DIVERGENCE_EXCERPT} characters."
    )
    action: OnDivergence = Field(..., description="What the replay did: stop or go on live.")


@register
class RunGoldenMarked(Command):
    """A person marked a finished run golden (an eval case: docs/lab.md), or took it back."""

    event_family: ClassVar[Family] = Family.RUN
    event_name: ClassVar[str] = RunEvent.GOLDEN_MARKED

    golden: bool = Field(True, description="True marks the run golden, false takes it back.")
    marked_by: str | None = Field(None, description="Who marked it.")
    note: str = Field("", description="Why it is (or is no longer) golden.")


class ArmStats(BaseModel):
    """One canary arm's finished runs, as a canary decision saw them."""

    revision: int = Field(..., ge=1, description="The agent revision of the arm.")
    runs: int = Field(0, ge=0, description="Finished runs.")
    succeeded: int = Field(0, ge=0, description="Runs that completed.")
    success_rate: float = Field(0.0, ge=0, le=1, description="succeeded / runs.")
    mean_cost_usd: float = Field(0.0, ge=0, description="Mean cost per run.")
    mean_turns: float = Field(0.0, ge=0, description="Mean model turns per run.")


@register
class CanaryDecided(Event):
    """Core ended an agent's canary: promoted the candidate or rolled back, with the numbers
    behind it. The agent's next revision (the candidate's definition, or the current one
    without its canary) follows as `agent.applied`."""

    event_family: ClassVar[Family] = Family.CATALOG
    event_name: ClassVar[str] = "agent.canary_decided"

    decision: Literal["promote", "rollback"] = Field(..., description="What the policy said.")
    candidate_revision: int = Field(..., ge=1, description="The canary's candidate revision.")
    current_revision: int = Field(..., ge=1, description="The revision that named the canary.")
    rule: str = Field(..., description="The policy condition that decided, in one line.")
    candidate: ArmStats = Field(..., description="The candidate arm's outcomes.")
    current: ArmStats = Field(..., description="The current arm's outcomes.")


__all__ = ["DIVERGENCE_EXCERPT", "ArmStats", "CanaryDecided", "RunDiverged", "RunGoldenMarked"]
