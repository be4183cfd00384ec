"""The control channel's named consumers survive a NATS restart: a restarted server has lost
them (they live in memory), and the runner makes them again from where it left off, so an
inbox message and a cancel request sent after the restart still reach the run, and what it
had already received is not delivered twice."""

from __future__ import annotations

import asyncio

from nexus_events.contract import subjects
from nexus_events.events.inbox import InboxMessage
from nexus_events.events.runs import CancelRequested
from nexus_events.transport.bus import Bus, BusSettings
from nexus_testing import NatsServer, eventually

from nexus_runner.control import RunControl


async def test_control_follows_again_after_the_server_restarts(
    nats_server: NatsServer, bus: Bus
) -> None:
    run_id = "run-restart"
    settings = BusSettings(url=nats_server.url, name="runner", reconnect_time_wait=0.1)
    runner = await Bus.connect(settings, source="runner")
    control = RunControl(runner, run_id, 1)
    try:
        await control.start()
        await bus.publish(subjects.inbox(run_id), InboxMessage(text="before", sender="t"))
        await eventually(lambda: [m.text for m in control.received] == ["before"])

        await asyncio.to_thread(nats_server.restart, kill=True)
        await eventually(lambda: runner.nc.is_connected, within=15)
        await eventually(lambda: bus.nc.is_connected, within=15)

        await bus.publish(subjects.inbox(run_id), InboxMessage(text="after", sender="t"))
        cancel = CancelRequested(reason="user_requested", requested_by="t")
        await bus.publish(subjects.run_event(run_id, "cancel_requested"), cancel)
        await asyncio.wait_for(control.cancelled.wait(), 15)
        await eventually(lambda: len(control.received) == 2, within=15)
        assert [m.text for m in control.received] == ["before", "after"]
    finally:
        await control.stop()
        await runner.close()
