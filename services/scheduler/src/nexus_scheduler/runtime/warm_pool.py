"""The bookkeeping of warm runners (docs/warm-starts.md): per agent, which are idle, of which
shape, how many to start, and how long to wait after one died before its start; no processes.

An agent's pool learns its shape from the agent's runs as they are dispatched (its template:
the last one's shape). A run is handed only an idle runner of its agent whose shape equals its
own; a runner is taken once and never idle again. A runner that died idle is forgotten, and
the next start of its pool waits longer each time (`backoff`), so a runner that cannot start
does not loop hot; a hand-off resets the wait.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Generic, Protocol, TypeVar

from nexus_scheduler.runtime.confinement import RunShape

DEFAULT_KEY = "default"
BACKOFF_BASE_SECONDS = 1.0
BACKOFF_MAX_SECONDS = 60.0
EVICT_AFTER_SECONDS = 30.0


class PoolSizesError(ValueError):
    """NEXUS_WARM_POOL is not a JSON object of sizes."""


def parse_sizes(raw: str | Mapping[str, int]) -> dict[str, int]:
    """``{"default": 1, "<agent_id>": 2}`` (JSON text or a mapping); 0 = off for that key."""
    try:
        value = json.loads(raw) if isinstance(raw, str) else dict(raw)
    except ValueError as exc:
        raise PoolSizesError(f"not JSON: {exc}") from exc
    if not isinstance(value, dict):
        raise PoolSizesError('expected a JSON object, e.g. {"default": 1}')
    sizes: dict[str, int] = {}
    for key, size in value.items():
        if not isinstance(size, int) or isinstance(size, bool) or size < 0:
            raise PoolSizesError(f"{key}: {size!r} is not a size (an integer >= 0)")
        sizes[str(key)] = size
    return sizes


class Pooled(Protocol):
    """What the pool reads of a warm runner."""

    @property
    def agent(self) -> str: ...

    @property
    def shape(self) -> RunShape: ...


R = TypeVar("R", bound=Pooled)


@dataclass
class WarmPool(Generic[R]):
    """Idle runners by agent, the shape each agent's pool is filled with, and the backoff."""

    sizes: dict[str, int] = field(default_factory=dict)
    max_idle: int = 4
    idle: dict[str, list[R]] = field(default_factory=dict)
    templates: dict[str, RunShape] = field(default_factory=dict)
    starting: Counter[str] = field(default_factory=Counter)
    # Agents by their last dispatched run, longest ago first: who gives way at the idle cap,
    # and when (`monotonic`) that run was dispatched.
    recent: dict[str, float] = field(default_factory=dict)
    # Only agents with no run dispatched for this long give way: in a burst over more agents
    # than the cap, each dispatch would otherwise discard a runner another just started.
    evict_after: float = EVICT_AFTER_SECONDS
    monotonic: Callable[[], float] = time.monotonic
    _deaths: Counter[str] = field(default_factory=Counter)

    def size(self, agent: str) -> int:
        return self.sizes.get(agent, self.sizes.get(DEFAULT_KEY, 0))

    @property
    def idle_count(self) -> int:
        return sum(len(runners) for runners in self.idle.values())

    def learn(self, agent: str, shape: RunShape) -> list[R]:
        """A run of `agent` with `shape` was dispatched: its pool is filled with that shape
        from now on. Returns the idle runners the caller discards: those of another shape,
        and, when the idle cap leaves `agent` no room, those of the agents dispatched longest
        ago, if that is over `evict_after` (the pool follows the work: a flow's next steps,
        not the agents of an hour ago)."""
        if self.size(agent) == 0:
            return []
        self.recent.pop(agent, None)
        self.recent[agent] = self.monotonic()
        self.templates[agent] = shape
        runners = self.idle.get(agent, [])
        stale = [r for r in runners if r.shape != shape]
        self.idle[agent] = [r for r in runners if r.shape == shape]
        return stale + self._make_room(agent)

    def _make_room(self, agent: str) -> list[R]:
        mine = len(self.idle.get(agent, [])) + self.starting[agent]
        room = self.max_idle - self.idle_count - sum(self.starting.values())
        short = min(self.size(agent), self.max_idle) - mine - room
        evicted: list[R] = []
        horizon = self.monotonic() - self.evict_after
        for other, dispatched in self.recent.items():  # longest ago first
            if dispatched > horizon:
                break  # this one and every later one are in use now
            runners = self.idle.get(other, []) if other != agent else []
            while runners and short > 0:
                evicted.append(runners.pop(0))
                short -= 1
        return evicted

    def wanted(self, agent: str) -> int:
        """How many runners to start for `agent` now: up to its size, within the idle cap."""
        if agent not in self.templates:
            return 0
        mine = len(self.idle.get(agent, [])) + self.starting[agent]
        room = self.max_idle - self.idle_count - sum(self.starting.values())
        return max(0, min(self.size(agent) - mine, room))

    def take(self, agent: str, shape: RunShape) -> R | None:
        """An idle runner of `agent` of exactly `shape`, no longer idle; None if there is none."""
        runners = self.idle.get(agent, [])
        for i, runner in enumerate(runners):
            if runner.shape == shape:
                del runners[i]
                self._deaths[agent] = 0  # a runner of this pool started and served
                return runner
        return None

    def add(self, runner: R) -> None:
        """A runner started (counted in `starting` until now) and waits, idle."""
        self.idle.setdefault(runner.agent, []).append(runner)

    def forget(self, runner: R) -> bool:
        """Drop `runner` if it is idle (it died, or is discarded); whether it was."""
        runners = self.idle.get(runner.agent, [])
        if runner in runners:
            runners.remove(runner)
            return True
        return False

    def died(self, agent: str) -> None:
        """A runner of `agent` died idle (or could not start): the next start waits longer."""
        self._deaths[agent] += 1

    def backoff(self, agent: str) -> float:
        """Seconds before the next start of `agent`'s pool: 0, then 1, 2, 4 ... 60 s."""
        deaths = self._deaths[agent]
        if deaths == 0:
            return 0.0
        return min(BACKOFF_MAX_SECONDS, BACKOFF_BASE_SECONDS * (1 << min(deaths - 1, 16)))

    def drain(self) -> list[R]:
        """Every idle runner, no longer idle (the runtime closes)."""
        runners = [r for pool in self.idle.values() for r in pool]
        self.idle.clear()
        return runners
