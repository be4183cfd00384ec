"""plane-sync's counters: webhooks by outcome, writes by outcome, and the mirror lag.

Plain numbers (no exporter needed): `nexus plane status` reports them and the bench reads the
lag samples (seconds from a run event's JetStream time to its write landing on Plane).
"""

from __future__ import annotations

from collections import Counter, deque
from dataclasses import dataclass, field

LAG_SAMPLES = 10_000  # the last writes' lags kept for percentiles


@dataclass
class PlaneSyncMetrics:
    webhooks: Counter[str] = field(default_factory=Counter)
    writes: Counter[str] = field(default_factory=Counter)
    lags: deque[float] = field(default_factory=lambda: deque(maxlen=LAG_SAMPLES))
