"""Work done in steps on the event loop, and finished in a worker thread past a few steps."""

from __future__ import annotations

import asyncio
from collections.abc import Generator
from typing import TypeVar

T = TypeVar("T")


def _advance(steps: Generator[None, None, T], limit: int | None) -> list[T]:
    """Run up to `limit` steps (all with None): [the result] once done, else []."""
    taken = 0
    while limit is None or taken < limit:
        try:
            next(steps)
        except StopIteration as stop:
            return [stop.value]
        taken += 1
    return []


async def finish_in_thread(steps: Generator[None, None, T], inline_steps: int) -> T:
    """The generator's return value: its first `inline_steps` steps run here, the rest (if
    any) in a worker thread, so short work pays no thread hop and long work never holds the
    loop. An exception from a step is raised here. Either way the generator runs to its end
    (a cancelled caller leaves the thread to finish it, as `asyncio.to_thread` does), so
    what it holds open is closed by its own `with` blocks."""
    done = _advance(steps, inline_steps)
    if not done:
        done = await asyncio.to_thread(_advance, steps, None)
    return done[0]
