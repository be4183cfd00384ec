"""The control channel stops even when a cancellation of its check loop is lost.

On Python 3.11, `asyncio.wait_for` (nats-py's requests use it) can swallow a cancellation that
lands while the awaited call is completing. The check loop's consumer check is such a call:
a stop that only cancelled the loop and awaited it then waited forever, after the run's
heartbeats had stopped and before its end was published, and the scheduler found the run
silent although it had finished (and pushed).
"""

from __future__ import annotations

import asyncio

import pytest
from nexus_events.transport.bus import Bus

from nexus_runner import control as control_module
from nexus_runner.control import RunControl


async def test_stop_returns_when_the_check_loop_swallows_its_cancellation(
    bus: Bus, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(control_module, "_CHECK_INTERVAL", 0.05)
    control = RunControl(bus, "run-stop-swallowed", 1)
    await control.start()
    checking = asyncio.Event()
    swallowed: list[bool] = []

    async def ensure_swallowing_cancel() -> None:
        # What asyncio.wait_for on 3.11 can do, once: the call completes, the cancel is lost.
        checking.set()
        try:
            await asyncio.sleep(0.2)
        except asyncio.CancelledError:
            if swallowed:
                raise
            swallowed.append(True)

    for subject in control._followed:
        monkeypatch.setattr(subject, "ensure", ensure_swallowing_cancel)
    await asyncio.wait_for(checking.wait(), 5)
    # Not wait_for: its own cancel would be one more for the loop to swallow.
    stopping = asyncio.create_task(control.stop())
    done, _ = await asyncio.wait({stopping}, timeout=5)
    assert stopping in done, "stop() still waiting for the check loop after 5 s"
    assert not control._checks.running
    assert swallowed == [True]
