"""An undecodable message to a run's inbox is dead-lettered, not dropped, and the run's
control channel goes on reading what follows."""

from __future__ import annotations

import asyncio

from nexus_events.contract import subjects
from nexus_events.events.inbox import InboxMessage
from nexus_events.transport.bus import Bus
from nexus_testing import dead_letters, eventually

from nexus_runner.control import RunControl


async def test_undecodable_inbox_message_is_dead_lettered(bus: Bus):
    run_id = "run_inbox_poison"
    control = RunControl(bus, run_id)
    await control.start()
    try:
        bad = await bus.js.publish(subjects.inbox(run_id), b"{not json")
        await bus.publish(subjects.inbox(run_id), InboxMessage(text="still here", sender="ann"))
        await asyncio.wait_for(control.message_arrived.wait(), 10)
        assert [m.text for m in control.received] == ["still here"]
        letters = await eventually(lambda: dead_letters(bus), what="a dead letter")
    finally:
        await control.stop()
    [letter] = letters
    assert (letter.stream_seq, letter.reason) == (bad.seq, "undecodable")
    assert letter.consumer == f"runner:{run_id}"
    assert letter.subject == subjects.inbox(run_id)
