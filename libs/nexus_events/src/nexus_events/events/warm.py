"""What a warm runner is handed (issue 41, docs/warm-starts.md): the one run it serves.

A warm runner is a runner process (a local process or a Kubernetes pod) started ahead of any
run, its imports done, holding no credential. The scheduler hands it exactly one run: the
run's config, the run's own environment (``NEXUS_RUN_ID``, its NATS credential, the trace
context) and where its workspace is. The runner serves that run and exits; it never takes a
second one, so nothing of one run can reach the next.
"""

from __future__ import annotations

from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field

from nexus_events.events.runs import RunConfig


class WarmHandoff(BaseModel):
    """The one run a warm runner serves (a JSON line on its stdin, or a NATS request)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    config: RunConfig = Field(..., description="The run's config, as a cold runner reads it.")
    env: dict[str, str] = Field(
        default_factory=dict,
        description=(
            "The run's own variables, set before the runner reads its settings: NEXUS_RUN_ID,"
            " its NATS credential (NEXUS_NATS_*), TRACEPARENT/TRACESTATE."
        ),
    )
    workspace: str | None = Field(
        None,
        description=(
            "The run's workspace directory (a warm runner's slot, made and bound when it"
            " started); None: <workspace_root>/<run_id>, as a cold runner."
        ),
    )


class WarmClaimStatus(StrEnum):
    ACCEPTED = "accepted"  # this pod serves the handed run (the first hand-off, or it again)
    TAKEN = "taken"  # this pod already serves another run: start the handed one elsewhere


class WarmClaim(BaseModel):
    """A warm pod's answer to a hand-off (Kubernetes, ``nexus.runner.v1.warm.<slot>``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    status: WarmClaimStatus = Field(..., description="Whether this pod serves the handed run.")
    run_id: str = Field(..., description="The run this pod serves (the handed one if accepted).")
    attempt: int = Field(..., ge=1, description="The attempt of that run this pod serves.")
