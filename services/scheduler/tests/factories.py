"""Builders of run configs and events for the scheduler tests."""

from __future__ import annotations

from nexus_events.events import (
    Budgets,
    ModelSpec,
    ResumePolicy,
    RunConfig,
    RunPrepared,
    RuntimeSpec,
)


def config(
    run_id: str,
    agent_id: str = "implementer",
    task_id: str | None = None,
    *,
    wall_seconds: int = 3600,
    image: str | None = None,
    max_concurrent_runs: int | None = None,
    max_attempts: int = 1,
) -> RunConfig:
    """A run config. `max_attempts` is 1 (never resume) unless a test is about resuming: the
    tests of losing a run see the ending itself, not the attempt after it."""
    return RunConfig(
        run_id=run_id,
        agent_id=agent_id,
        task_id=task_id,
        system_prompt="You implement things.",
        model=ModelSpec(name="fake-model"),
        budgets=Budgets(max_wall_seconds=wall_seconds),
        runtime=RuntimeSpec(image=image, cpu="500m", memory="1Gi"),
        max_concurrent_runs=max_concurrent_runs,
        resume=ResumePolicy(max_attempts=max_attempts),
    )


def prepared(
    run_id: str, agent_id: str = "implementer", task_id: str | None = None, **kw: object
) -> RunPrepared:
    return RunPrepared(config=config(run_id, agent_id, task_id, **kw))  # type: ignore[arg-type]
