"""Run events of every kind for core's tests: the unit fold tests and the projection's
property test against PostgreSQL draw from the same makers."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hypothesis import strategies as st
from nexus_events.events import (
    ApprovalDecided,
    ApprovalRequested,
    Condensation,
    Event,
    ModelSpec,
    RunBudgetPaused,
    RunBudgetResumed,
    RunCancelled,
    RunCheckpointed,
    RunCompleted,
    RunCondensed,
    RunConfig,
    RunDispatched,
    RunFailed,
    RunHeartbeat,
    RunPrepared,
    RunQueued,
    RunRequested,
    RunResult,
    RunResumed,
    RunResuming,
    RunSleeping,
    RunStarted,
    RunTurn,
    RunWakeRequested,
)
from nexus_events.events.lab import RunDiverged, RunGoldenMarked
from nexus_events.events.lab_specs import CanaryArm, DivergenceKind, LabMode, LabSpec, OnDivergence
from nexus_events.events.specs import RepoSpec

T0 = datetime(2026, 1, 1, tzinfo=UTC)
CONFIG = RunConfig(
    run_id="r",
    agent_id="a",
    task_id="T",
    system_prompt="p",
    model=ModelSpec(name="m"),
    catalog_revisions={"agent/a": 2},
    team="alpha",
)
EXPIRES = T0 + timedelta(hours=1)
# A lab run assembled as a canary's arm (the lab's fields of the row).
LAB_CONFIG = CONFIG.model_copy(
    update={
        "lab": LabSpec(mode=LabMode.FORK, source_run_id="src", at_turn=2),
        "canary": CanaryArm(arm="candidate", candidate_revision=2, current_revision=3, share=0.5),
        "repo": RepoSpec(url="/src/lab", ref="c0"),
        "team": "beta",
    }
)


def make(name: str, i: int) -> Event:
    """An event of each kind; `i` varies the payload."""
    makers = {
        "requested": lambda: RunRequested(
            agent_id="a",
            task_id="T",
            input=f"in{i}",
            repo=f"/src/{i}",
            lab=LabSpec(mode=LabMode.REPLAY, source_run_id=f"s{i}") if i % 2 else None,
        ),
        "prepared": lambda: RunPrepared(config=LAB_CONFIG if i % 2 else CONFIG),
        "queued": lambda: (
            RunQueued(position=i + 1, limit="budget", waiting_for=f"budget b{i} reached")
            if i % 2
            else RunQueued(position=i + 1, limit="global")
        ),
        "budget_paused": lambda: RunBudgetPaused(
            budget_id=f"b{i}",
            instance="team:alpha",
            bucket="2026-01",
            turn=1 + i % 3,
            message=f"budget b{i}: team:alpha reached; asking",
        ),
        "budget_resumed": lambda: RunBudgetResumed(budget_id=f"b{i}", turn=1 + i % 3),
        "dispatched": lambda: RunDispatched(runtime="local", handle=f"h{i}", attempt=1 + i % 2),
        "started": lambda: RunStarted(base_commit=f"b{i}"),
        "golden_marked": lambda: RunGoldenMarked(golden=i % 3 != 0),
        "diverged": lambda: RunDiverged(
            turn=1 + i % 3, kind=DivergenceKind.MESSAGE, detail=f"d{i}", action=OnDivergence.STOP
        ),
        "heartbeat": lambda: RunHeartbeat(seq=i),
        "turn": lambda: RunTurn(turn=1 + i % 4, tokens_in=10 * i, tokens_out=i, cost_usd=0.01 * i),
        "approval_requested": lambda: ApprovalRequested(
            approval_id=f"a{i}", tool="git_push", summary="push", expires_at=EXPIRES
        ),
        "approval_decided": lambda: ApprovalDecided(approval_id=f"a{i}", decision="approved"),
        "completed": lambda: RunCompleted(result=RunResult(summary=f"done {i}"), tokens_in=i),
        "failed": lambda: RunFailed(reason="runner_error", message=f"boom {i}"),
        "cancelled": RunCancelled,
        "resuming": lambda: RunResuming(attempt=2 + i % 2, reason="runtime_gone"),
        "resumed": lambda: RunResumed(attempt=2 + i % 2, turns=i, messages=2 * i, entries=i),
        "checkpointed": lambda: RunCheckpointed(
            turn=1 + i % 4, commit=f"c{i}", object=f"r/1-{i}", digest="d", size=i
        ),
        "sleeping": lambda: RunSleeping(
            until=T0 + timedelta(minutes=5 + i), reason=f"wait {i}", attempt=1 + i % 2, turn=i
        ),
        "wake_requested": lambda: RunWakeRequested(reason=f"go {i}", requested_by="ann"),
        "condensed": lambda: RunCondensed(
            turn=1 + i % 3,
            tokens_before=100,
            tokens_after=50,
            budget=80,
            counter="estimate",
            condensation=Condensation(strategy="elide" if i % 2 else "summarise"),
        ),
    }
    return makers[name]()


NAMES = [
    "requested",
    "prepared",
    "queued",
    "dispatched",
    "started",
    "heartbeat",
    "turn",
    "approval_requested",
    "approval_decided",
    "completed",
    "failed",
    "cancelled",
    "resuming",
    "resumed",
    "checkpointed",
    "condensed",
    "golden_marked",
    "diverged",
    "budget_paused",
    "budget_resumed",
    "sleeping",
    "wake_requested",
]


# A run's event names in stream order: any mix, repeats included.
stream = st.lists(st.sampled_from(NAMES), min_size=1, max_size=25)
