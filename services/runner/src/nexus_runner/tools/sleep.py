"""The `sleep` tool (docs/resume.md, Sleep): the agent waits until a time without holding a
runner or a scheduler slot.

The call itself only decides: `plan_sleep` checks the arguments against the injected `now`
and the agent's `resume.max_sleep_seconds` (a pure function), and the handler records the
accepted `SleepPlan` on the tool context. The loop then checkpoints the workspace before the
call's answer, answers the turn's later calls as not run, and ends the turn; the run's
lifecycle (nexus_runner.app) publishes `sleeping` and ends the attempt without an ending.
Whatever is wrong with a call is refused to the model with the reason, and the run goes on.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from pydantic import Field

from nexus_runner.errors import ToolError
from nexus_runner.tools.args import ToolArgs

if TYPE_CHECKING:
    from nexus_runner.tools.context import ToolContext

SLEEP = "sleep"
# A wake time closer than this is not worth ending the attempt for (and a clock's skew
# between the runner and the scheduler could make it already past).
MIN_SLEEP_SECONDS = 1.0
# The answer to an accepted sleep starts with this: a resumed attempt recognises the sleep
# its predecessor took by it (nexus_runner.waking).
ACCEPTED = "sleeping until "
MAX_REASON = 2000  # RunSleeping.reason's bound


class SleepArgs(ToolArgs):
    """Sleep until a time, then go on with the task: the run is checkpointed and gives its
    runner back while it sleeps; you are told why you woke (the time came, someone woke you,
    or a message arrived). Give exactly one of `seconds` or `until`."""

    seconds: float | None = Field(None, description="How long to sleep, in seconds.")
    until: str | None = Field(
        None,
        description="When to wake: an ISO-8601 time, e.g. 2026-01-31T09:00:00Z (no offset: UTC).",
    )
    reason: str = Field(
        ...,
        min_length=1,
        max_length=MAX_REASON,
        description="What you are waiting for (told back to you when you wake).",
    )


@dataclass(frozen=True)
class SleepPlan:
    """An accepted sleep: when to wake and why."""

    until: datetime
    reason: str


def parse_until(text: str) -> datetime:
    """An ISO-8601 time as an aware UTC datetime (naive = UTC); `ToolError` when it is not one."""
    raw = text.strip()
    try:
        when = datetime.fromisoformat(raw)
    except ValueError:
        raise ToolError(
            f"sleep refused: until {raw!r} is not an ISO-8601 time (e.g. 2026-01-31T09:00:00Z)"
        ) from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return when.astimezone(UTC)


def stamp(when: datetime) -> str:
    """A time as the model reads it: UTC, to the second, with a Z."""
    return when.astimezone(UTC).replace(microsecond=0).isoformat().replace("+00:00", "Z")


def plan_sleep(args: SleepArgs, now: datetime, max_seconds: int) -> SleepPlan:
    """The sleep `args` asks for at `now` under the agent's limit, or `ToolError` saying why
    it is refused: both or neither of seconds/until, an unreadable time, a wake time in the
    past or under MIN_SLEEP_SECONDS away, longer than `max_seconds`, or 0 = may not sleep."""
    if max_seconds <= 0:
        raise ToolError(
            "sleep refused: this agent may not sleep (its resume.max_sleep_seconds is 0)"
        )
    if (args.seconds is None) == (args.until is None):
        given = "both" if args.seconds is not None else "neither"
        raise ToolError(f"sleep refused: give exactly one of `seconds` or `until` ({given} given)")
    if args.seconds is not None:
        if not math.isfinite(args.seconds):
            raise ToolError(f"sleep refused: seconds must be a finite number, not {args.seconds}")
        if args.seconds > max_seconds:  # before the timedelta: an absurd number overflows it
            raise ToolError(_too_long(args.seconds, max_seconds))
        until = now + timedelta(seconds=args.seconds)
    else:
        assert args.until is not None
        until = parse_until(args.until)
    ahead = (until - now).total_seconds()
    if ahead < 0:
        raise ToolError(
            f"sleep refused: the wake time {stamp(until)} is in the past (it is now {stamp(now)})"
        )
    if ahead < MIN_SLEEP_SECONDS:
        raise ToolError(
            f"sleep refused: the wake time is {ahead:.2f} s away; sleep at least"
            f" {MIN_SLEEP_SECONDS:g} s"
        )
    if ahead > max_seconds:
        raise ToolError(_too_long(ahead, max_seconds))
    return SleepPlan(until=until, reason=args.reason.strip() or args.reason)


def _too_long(seconds: float, max_seconds: int) -> str:
    return (
        f"sleep refused: {seconds:.0f} s is longer than this agent's limit,"
        f" resume.max_sleep_seconds = {max_seconds} s"
    )


def accepted_answer(plan: SleepPlan) -> str:
    return (
        f"{ACCEPTED}{stamp(plan.until)} ({plan.reason}). The run is checkpointed and ends this"
        " attempt now; it goes on from here when it wakes, and you will be told why it woke."
    )


async def sleep(ctx: ToolContext, args: SleepArgs) -> str:
    if ctx.slept is not None:
        raise ToolError(f"sleep refused: this turn already sleeps until {stamp(ctx.slept.until)}")
    plan = plan_sleep(args, ctx.clock.now(), ctx.max_sleep_seconds)
    ctx.slept = plan
    return accepted_answer(plan)
