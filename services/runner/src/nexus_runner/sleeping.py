"""The end of an attempt that sleeps (docs/resume.md, Sleep; the hand-over to the scheduler).

By the time the loop returns the model's `SleepPlan`, the workspace is checkpointed and the
sleep's answer (and the turn's other answers) are in the transcript. Here they are made
durable, then ``sleeping`` is published and acked by JetStream: only then does the attempt
end, with no terminal event, heartbeats stopped first (none may follow ``sleeping``), and
the process exits 0. The scheduler takes it from the stream.
"""

from __future__ import annotations

import asyncio

from nexus_events.contract.runstate import RunStatus
from nexus_events.events.runs import RunSleeping

from nexus_runner.loop import AgentLoop
from nexus_runner.tools.sleep import SleepPlan


async def fall_asleep(loop: AgentLoop, plan: SleepPlan, quiet: asyncio.Event) -> RunSleeping:
    """Store what the woken attempt goes on from, then publish ``sleeping``; return it.
    A run ended elsewhere meanwhile raises `RunStopped` instead (it does not sleep)."""
    loop.phase = RunStatus.SLEEPING.value
    if loop.transcript is not None:
        await loop.transcript.flush()  # the sleep's answer: the woken attempt resends it
    await loop.pub.flush()  # `checkpointed` and the calls' events come before `sleeping`
    loop.control.ensure_not_ended()
    quiet.set()  # heartbeats stop: none goes out after `sleeping`
    event = RunSleeping(
        until=plan.until,
        reason=plan.reason,
        attempt=loop.pub.attempt,
        turn=loop.usage.turns,
    )
    await loop.pub.event(event)
    await loop.pub.flush()
    return event
