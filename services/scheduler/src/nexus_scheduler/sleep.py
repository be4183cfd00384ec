"""When sleeping runs wake: pure decisions on the admission state, an injected `now`.

A run that slept (`AdmissionState.sleeping`) wakes at its wake time, or earlier when a wake
was asked of it (`wake_requested`, or a message on its inbox: `Asleep.woken_by`). Waking it
is publishing `resuming` (attempt n+1, reason `woke`, the `RunWake`) with the attempt's
deterministic message id; folding that `resuming` puts the run back in the queue. A cancel
of a sleeping run ends it at once: there is no runner to stop.

Each run is decided once: `decide_wakes` marks the entries it wakes (`waking`) or ends
(`ending`), so a timer and a signal racing in two calls wake the run once; the message id
makes a second leader's `resuming` for the same attempt a duplicate JetStream drops.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from nexus_events.events import RunWake

from nexus_scheduler.admission import AdmissionState, CancelWaiting


@dataclass(frozen=True)
class WakeUp:
    """Start `attempt` of a sleeping run, telling it why it woke."""

    run_id: str
    attempt: int
    wake: RunWake


def decide_wakes(state: AdmissionState, now: datetime) -> list[WakeUp | CancelWaiting]:
    """The sleeping runs to wake or end at `now`, each marked so it is not decided again."""
    out: list[WakeUp | CancelWaiting] = []
    for run_id in sorted(state.sleeping):
        entry = state.runs.get(run_id)
        if entry is None or entry.sleep is None or entry.waking or entry.ending:
            continue
        if entry.cancel is not None:
            entry.ending = True
            out.append(CancelWaiting(run_id, entry.cancel))
            continue
        wake = entry.sleep.wake(now)
        if wake is not None:
            entry.waking = True
            out.append(WakeUp(run_id, entry.attempt + 1, wake))
    return out
