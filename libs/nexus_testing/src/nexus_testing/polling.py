"""Waiting in tests: poll a condition until a deadline instead of sleeping a guessed time."""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable
from typing import Any


class _Deadline:
    """The one rule of waiting in tests: poll until a value satisfies `until` (default: is
    truthy), or fail with `what`, the last value seen and `detail()` (say, a process's log
    tail, read only then) once `within` seconds pass."""

    def __init__(
        self,
        until: Callable[[Any], bool] | None,
        within: float,
        what: str,
        detail: Callable[[], str] | None = None,
    ) -> None:
        self.until, self.within, self.what, self.detail = until, within, what, detail
        self.deadline = time.monotonic() + within

    def met(self, value: Any) -> bool:
        if self.until(value) if self.until is not None else value:
            return True
        if time.monotonic() >= self.deadline:
            why = f"{self.what} not reached within {self.within}s (last: {value!r})"
            raise AssertionError(why if self.detail is None else f"{why}\n{self.detail()}")
        return False


async def eventually(
    probe: Callable[[], Any | Awaitable[Any]],
    until: Callable[[Any], bool] | None = None,
    *,
    within: float = 10.0,
    interval: float = 0.02,
    what: str = "condition",
    detail: Callable[[], str] | None = None,
) -> Any:
    """Poll `probe` (sync or async) until its value satisfies `until` (default: is truthy);
    return that value. The one way tests wait for something, instead of sleeping.

    Fails the test with `what`, the last value seen and `detail()` if the deadline passes
    first; an exception the probe raises (an assert that a process still runs) fails at once.
    """
    deadline = _Deadline(until, within, what, detail)
    while True:
        value = probe()
        if inspect.isawaitable(value):
            value = await value
        if deadline.met(value):
            return value
        await asyncio.sleep(interval)


def eventually_blocking(
    probe: Callable[[], Any],
    until: Callable[[Any], bool] | None = None,
    *,
    within: float = 30.0,
    interval: float = 0.5,
    what: str = "condition",
    detail: Callable[[], str] | None = None,
) -> Any:
    """`eventually` for synchronous tests (a dev stack of processes, the CLI as a
    subprocess): the same rule, blocking; the longer defaults suit process start-ups, and a
    probe that runs the CLI costs about a second of CPU, which the stack under test needs
    too (polled every 0.1 s, the probes of one wait kept a core busy)."""
    deadline = _Deadline(until, within, what, detail)
    while True:
        value = probe()
        if deadline.met(value):
            return value
        time.sleep(interval)
