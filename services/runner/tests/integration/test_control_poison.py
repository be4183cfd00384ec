"""An undecodable message to a run's inbox is dead-lettered, not dropped, and the run's
control channel goes on reading what follows."""

from __future__ import annotations

import asyncio

from nexus_events import subjects
from nexus_events.bus import Bus, decode_msg
from nexus_events.events import DeadLetter
from nexus_events.events.inbox import InboxMessage
from nexus_events.streams import DLQ

from nexus_runner.control import RunControl


async def _letters(bus: Bus) -> list[DeadLetter]:
    out = []
    async for msg in bus.replay_raw(DLQ):
        letter = decode_msg(msg).event
        assert isinstance(letter, DeadLetter)
        out.append(letter)
    return out


async def _eventually_letters(bus: Bus) -> list[DeadLetter]:
    # The letter is published from the subscription callback: poll the DLQ with a deadline.
    for _ in range(200):
        if letters := await _letters(bus):
            return letters
        await asyncio.sleep(0.05)
    raise AssertionError("no dead letter within 10 s")


async def test_undecodable_inbox_message_is_dead_lettered(bus: Bus):
    run_id = "run_inbox_poison"
    control = RunControl(bus, run_id)
    await control.start()
    try:
        bad = await bus.js.publish(subjects.inbox(run_id), b"{not json")
        await bus.publish(subjects.inbox(run_id), InboxMessage(text="still here", sender="ann"))
        await asyncio.wait_for(control.message_arrived.wait(), 10)
        assert [m.text for m in control.received] == ["still here"]
        letters = await _eventually_letters(bus)
    finally:
        await control.stop()
    [letter] = letters
    assert (letter.stream_seq, letter.reason) == (bad.seq, "undecodable")
    assert letter.consumer == f"runner:{run_id}"
    assert letter.subject == subjects.inbox(run_id)
