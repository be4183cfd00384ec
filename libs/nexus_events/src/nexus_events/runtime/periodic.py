"""`PeriodicTask`: a service's step run every N seconds in the background, with one stop rule.

Every periodic job of the services (a tick, a poll, a sweep, a flush, a snapshot) is one of
these, so each starts, survives a failing step and stops the same way:

- The step runs at once on `start` (``first="now"``) or one interval later
  (``first="after_interval"``); then one `interval` after each step *ends* (a fixed delay, so
  a step slower than the interval never leaves a backlog of steps to run back to back).
- `wake()` (or setting the `wake` event the task was given) cuts the current wait short: the
  next step runs at once. A wake that arrives during a step runs the next one straight after.
- A step that raises is logged (one warning line for the `quiet` errors, e.g. "NATS away",
  else with its traceback) and the task goes on. With `retry_after` (or an `on_error` that
  returns a delay) the next step comes after that backoff, which only `stop` cuts short, and
  not at the next wake: a failing step is not retried at the pace of the wakes.
- `stop()` sets the stop event: a wait ends at once, a step in flight is given `stop_grace`
  seconds to finish and then cancelled (None, the default: it finishes, however long it
  takes; 0: it is cancelled at once, for steps that are safe to cut and act only while the
  service may, such as a leader's tick), and no step runs after it. `stop()` is idempotent,
  safe before `start()`, and `start()` may follow it (a replica leading again). Cancelling
  `stop()` (a drain timeout) cancels the step in flight too.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import Literal

log = logging.getLogger(__name__)

# How the task waits: until `event` is set or `seconds` have passed, whichever is first.
# Injectable so tests drive the waits without the real clock.
Sleep = Callable[[asyncio.Event, float], Awaitable[None]]


async def sleep_until_set(event: asyncio.Event, seconds: float) -> None:
    """Wait for `event` at most `seconds` (the default `Sleep`)."""
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(event.wait(), timeout=seconds)


class PeriodicTask:
    """Runs `step()` every `interval` seconds from `start()` to `stop()` (see the module)."""

    def __init__(
        self,
        step: Callable[[], Awaitable[object]],
        interval: float,
        *,
        name: str,
        first: Literal["now", "after_interval"] = "now",
        wake: asyncio.Event | None = None,
        quiet: tuple[type[Exception], ...] = (),
        retry_after: float | None = None,
        on_error: Callable[[Exception], float | None] | None = None,
        stop_grace: float | None = None,
        logger: logging.Logger | None = None,
        sleep: Sleep = sleep_until_set,
    ) -> None:
        """`name` says what the step is ("scheduler tick") in the task's name and in the
        logs, which go to `logger` (the service's module logger, so records keep their
        origin). `on_error`, when given, reports a failed step instead of the default log
        line and returns the backoff (None: the next step comes at the interval)."""
        if interval <= 0:
            raise ValueError(f"{name}: the interval must be positive, not {interval}")
        self.step = step
        self.interval = interval
        self.name = name
        self.first = first
        self.quiet = quiet
        self.retry_after = retry_after
        self.on_error = on_error
        self.stop_grace = stop_grace
        self.log = logger or log
        self._sleep = sleep
        self._wake = wake or asyncio.Event()
        self._stopping = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.steps = 0  # steps begun (tests and metrics read it)
        self.failures = 0  # steps that raised

    @property
    def task(self) -> asyncio.Task[None] | None:
        """The running loop (None before `start` and after `stop`)."""
        return self._task

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    def start(self) -> asyncio.Task[None]:
        """Start the loop (again, after a `stop`); a second `start` while running is a no-op."""
        if self._task is not None and not self._task.done():
            return self._task
        self._stopping.clear()
        self._task = asyncio.create_task(self._run(), name=self.name)
        return self._task

    def wake(self) -> None:
        """Run the next step now rather than at the end of the interval."""
        self._wake.set()

    async def stop(self) -> None:
        """End the wait at once, give a step in flight `stop_grace` to finish (then cancel
        it), and return when the loop has ended."""
        self._stopping.set()
        self._wake.set()
        task, self._task = self._task, None
        if task is None or task is asyncio.current_task():
            return
        try:
            if self.stop_grace is not None:
                await asyncio.wait({task}, timeout=self.stop_grace)
                task.cancel()  # nothing if it has ended
            await asyncio.wait({task})
        except asyncio.CancelledError:
            task.cancel()
            raise
        if not task.cancelled():
            task.result()  # the loop raises nothing but a BaseException: let that through

    async def _run(self) -> None:
        delay = self.interval if self.first == "after_interval" else 0.0
        while not self._stopping.is_set():
            if delay > 0:
                await self._sleep(self._wake, delay)
                if self._stopping.is_set():
                    return
            # Cleared before the step: a wake sent while it runs asks for another one.
            self._wake.clear()
            delay = self.interval
            self.steps += 1
            try:
                await self.step()
            except Exception as exc:  # noqa: BLE001 - a failed step must not end the loop; logged
                self.failures += 1
                backoff = self._failed(exc)
                if backoff is not None:
                    await self._sleep(self._stopping, backoff)
                    delay = 0.0

    def _failed(self, exc: Exception) -> float | None:
        if self.on_error is not None:
            return self.on_error(exc)
        if isinstance(exc, self.quiet):
            self.log.warning("%s failed: %s", self.name, exc)
        else:
            self.log.exception("%s failed", self.name)
        return self.retry_after


__all__ = ["PeriodicTask", "Sleep", "sleep_until_set"]
