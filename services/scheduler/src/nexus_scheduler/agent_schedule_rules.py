"""What an agent may schedule (pure): a valid trigger no more often than once a minute, under
its agent's cap, with an id derived from the asking run and call (docs/schedules.md)."""

from __future__ import annotations

import hashlib

from croniter import croniter
from nexus_events.events import AgentScheduleRequest

# The shortest gap between two fires of an agent's schedule: an agent must not turn a
# schedule into a busy loop of runs.
MIN_INTERVAL_SECONDS = 60
# How much text of an id token is kept from the agent id.
_AGENT_PART = 60


class ScheduleRefusedError(ValueError):
    """The request breaks a rule; its message, one line, is what the model reads."""


def check_trigger(request: AgentScheduleRequest) -> None:
    """Exactly one trigger, valid, and never two fires closer than `MIN_INTERVAL_SECONDS`
    (a five-field cron fires at most once a minute: only its validity is checked)."""
    if (request.cron is None) == (request.interval_seconds is None):
        raise ScheduleRefusedError("give exactly one of cron or interval_seconds")
    if request.interval_seconds is not None:
        if request.interval_seconds < MIN_INTERVAL_SECONDS:
            raise ScheduleRefusedError(
                f"interval_seconds {request.interval_seconds} is under the minimum of"
                f" {MIN_INTERVAL_SECONDS} s between runs"
            )
        return
    expr = (request.cron or "").strip()
    if len(expr.split()) != 5 or not croniter.is_valid(expr):
        raise ScheduleRefusedError(
            f"invalid cron {expr!r}: five fields (minute hour day month weekday), e.g. '0 9 * * 1'"
        )


def check_cap(agent_id: str, has: int, limit: int) -> None:
    if has >= limit:
        raise ScheduleRefusedError(
            f"agent {agent_id} has {has} schedules, the most allowed ({limit},"
            " NEXUS_AGENT_SCHEDULES_MAX): delete one first"
        )


def agent_schedule_id(agent_id: str, run_id: str, key: str) -> str:
    """The id of the schedule a run's call creates: the same for a retried call (same run
    and key), readable by its agent's name, a valid subject token."""
    digest = hashlib.blake2b(f"{run_id}\x00{key}".encode(), digest_size=8).hexdigest()
    agent = "".join(c if c.isalnum() or c in "-_" else "-" for c in agent_id)[:_AGENT_PART]
    return f"agent-{agent}-{digest}"


__all__ = [
    "MIN_INTERVAL_SECONDS",
    "ScheduleRefusedError",
    "agent_schedule_id",
    "check_cap",
    "check_trigger",
]
