"""`PeriodicTask`: when steps run, what a failing step does, and the one stop rule."""

from __future__ import annotations

import asyncio
import logging

import pytest
from nexus_events.runtime.periodic import PeriodicTask


class ManualWaits:
    """The task's `Sleep` on a manual clock: a wait ends when its event is set or the test
    calls `elapse()`; every wait's length is recorded."""

    def __init__(self) -> None:
        self.delays: list[float] = []
        self._elapsed = asyncio.Event()
        self.waiting = asyncio.Event()

    async def __call__(self, event: asyncio.Event, seconds: float) -> None:
        self.delays.append(seconds)
        self._elapsed = elapsed = asyncio.Event()
        self.waiting.set()
        waits = [asyncio.ensure_future(event.wait()), asyncio.ensure_future(elapsed.wait())]
        try:
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        finally:
            self.waiting.clear()
            for w in waits:
                w.cancel()

    def elapse(self) -> None:
        self._elapsed.set()

    async def next_wait(self) -> None:
        await asyncio.wait_for(self.waiting.wait(), 5)


class Steps:
    """A step that counts its runs; `hold` makes each run wait for `release`."""

    def __init__(self, *, hold: bool = False, fail: BaseException | None = None) -> None:
        self.runs = 0
        self.finished = 0
        self.running = asyncio.Event()
        self.release = asyncio.Event()
        self.hold = hold
        self.fail = fail

    async def __call__(self) -> None:
        self.runs += 1
        self.running.set()
        if self.hold:
            await self.release.wait()
        self.finished += 1
        if self.fail is not None:
            raise self.fail


async def settle() -> None:
    for _ in range(20):
        await asyncio.sleep(0)


async def test_steps_at_once_then_one_interval_after_each() -> None:
    waits, step = ManualWaits(), Steps()
    task = PeriodicTask(step, 5.0, name="tick", sleep=waits)
    task.start()
    await waits.next_wait()
    assert step.runs == 1
    assert waits.delays == [5.0]
    waits.elapse()
    await settle()
    assert step.runs == 2
    assert waits.delays == [5.0, 5.0]
    await task.stop()


async def test_after_interval_waits_before_the_first_step() -> None:
    waits, step = ManualWaits(), Steps()
    task = PeriodicTask(step, 2.0, name="sweep", first="after_interval", sleep=waits)
    task.start()
    await waits.next_wait()
    assert step.runs == 0
    waits.elapse()
    await settle()
    assert step.runs == 1
    await task.stop()


async def test_stop_while_sleeping_returns_at_once_and_runs_no_step() -> None:
    step = Steps()
    task = PeriodicTask(step, 3600.0, name="tick")  # the real wait: stop must cut it
    task.start()
    await settle()
    assert step.runs == 1
    await asyncio.wait_for(task.stop(), 1)
    assert step.runs == 1
    assert not task.running


async def test_stop_mid_step_lets_the_step_finish_and_runs_no_other() -> None:
    waits, step = ManualWaits(), Steps(hold=True)
    task = PeriodicTask(step, 1.0, name="flush", sleep=waits)
    task.start()
    await asyncio.wait_for(step.running.wait(), 5)
    stopping = asyncio.create_task(task.stop())
    await settle()
    assert not stopping.done()  # waits for the step in hand
    step.release.set()
    await asyncio.wait_for(stopping, 5)
    assert (step.runs, step.finished) == (1, 1)
    assert waits.delays == []  # no wait, no step after the stop


async def test_cancelling_stop_cancels_the_step_in_flight() -> None:
    step = Steps(hold=True)
    task = PeriodicTask(step, 1.0, name="drain")
    loop = task.start()
    await asyncio.wait_for(step.running.wait(), 5)
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(task.stop(), 0.05)
    assert loop.cancelled()
    assert step.finished == 0


async def test_a_stop_grace_cancels_a_step_that_outlasts_it() -> None:
    for grace in (0.0, 0.01):
        step = Steps(hold=True)
        task = PeriodicTask(step, 1.0, name="leader tick", stop_grace=grace)
        loop = task.start()
        await asyncio.wait_for(step.running.wait(), 5)
        await asyncio.wait_for(task.stop(), 5)
        assert loop.cancelled()
        assert (step.runs, step.finished) == (1, 0)


async def test_a_step_within_the_stop_grace_finishes() -> None:
    waits, step = ManualWaits(), Steps(hold=True)
    task = PeriodicTask(step, 1.0, name="flush", sleep=waits, stop_grace=30.0)
    loop = task.start()
    await asyncio.wait_for(step.running.wait(), 5)
    stopping = asyncio.create_task(task.stop())
    await settle()
    step.release.set()
    await asyncio.wait_for(stopping, 5)
    assert not loop.cancelled()
    assert step.finished == 1
    assert waits.delays == []


async def test_stop_is_idempotent_safe_before_start_and_start_may_follow() -> None:
    waits, step = ManualWaits(), Steps()
    task = PeriodicTask(step, 1.0, name="poll", sleep=waits)
    await task.stop()  # before start: nothing to do
    task.start()
    await waits.next_wait()
    await task.stop()
    await task.stop()
    assert step.runs == 1
    task.start()  # a replica leading again
    await settle()
    assert step.runs == 2
    await task.stop()


async def test_a_raising_step_is_logged_and_the_loop_goes_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    waits, step = ManualWaits(), Steps(fail=RuntimeError("boom"))
    logger = logging.getLogger("test.periodic")
    task = PeriodicTask(step, 1.0, name="scheduler tick", sleep=waits, logger=logger)
    with caplog.at_level(logging.WARNING, logger="test.periodic"):
        task.start()
        await waits.next_wait()
        waits.elapse()
        await settle()
    assert step.runs == 2
    assert task.failures == 2
    assert waits.delays == [1.0, 1.0]  # no backoff asked: the interval
    [first, *_] = caplog.records
    assert first.name == "test.periodic"
    assert first.getMessage() == "scheduler tick failed"
    assert first.exc_info is not None  # unexpected: with its traceback
    await task.stop()


async def test_quiet_errors_are_one_line_and_retry_after_is_a_backoff_wakes_do_not_cut(
    caplog: pytest.LogCaptureFixture,
) -> None:
    waits, step = ManualWaits(), Steps(fail=OSError("NATS away"))
    wake = asyncio.Event()
    task = PeriodicTask(
        step, 10.0, name="metrics poll", sleep=waits, wake=wake, quiet=(OSError,), retry_after=1.5
    )
    with caplog.at_level(logging.WARNING, logger="nexus_events.runtime.periodic"):
        task.start()
        await waits.next_wait()
        assert waits.delays == [1.5]
        wake.set()  # a wake during the backoff does not retry sooner
        await settle()
        assert step.runs == 1
        waits.elapse()
        await settle()
    assert step.runs == 2
    [record, *_] = caplog.records
    assert record.getMessage() == "metrics poll failed: NATS away"
    assert record.exc_info is None
    await task.stop()


async def test_on_error_reports_and_chooses_the_backoff() -> None:
    waits, step = ManualWaits(), Steps(fail=ValueError("x"))
    seen: list[Exception] = []

    def on_error(exc: Exception) -> float | None:
        seen.append(exc)
        return None if len(seen) > 1 else 0.5

    task = PeriodicTask(step, 4.0, name="outbox pass", sleep=waits, on_error=on_error)
    task.start()
    await waits.next_wait()
    waits.elapse()
    await settle()
    assert waits.delays == [0.5, 4.0]  # a backoff, then (None) the interval
    assert [str(e) for e in seen] == ["x", "x"]
    await task.stop()


async def test_wakes_during_a_step_pile_up_into_one_more_step() -> None:
    """No drift pile-up: however many wakes (or intervals) pass during a slow step, one
    step follows it, and then a whole interval."""
    waits, step = ManualWaits(), Steps(hold=True)
    task = PeriodicTask(step, 1.0, name="engine pass", sleep=waits)
    task.start()
    await asyncio.wait_for(step.running.wait(), 5)
    for _ in range(5):
        task.wake()
    step.hold = False
    step.release.set()
    await settle()
    assert step.runs == 2
    assert waits.delays == [1.0, 1.0]  # the first wait ended at once (woken), then a full one
    await task.stop()
    assert step.runs == 2


async def test_wake_cuts_the_wait_short() -> None:
    waits, step = ManualWaits(), Steps()
    task = PeriodicTask(step, 60.0, name="writer", sleep=waits)
    task.start()
    await waits.next_wait()
    task.wake()
    await settle()
    assert step.runs == 2
    await task.stop()


def test_the_interval_must_be_positive() -> None:
    with pytest.raises(ValueError, match="tick: the interval must be positive"):
        PeriodicTask(Steps(), 0, name="tick")
