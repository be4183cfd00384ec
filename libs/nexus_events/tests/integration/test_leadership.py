"""`Leadership` on a real nats-server: the fence token, and a first round in the background."""

from __future__ import annotations

import asyncio
import uuid

from nexus_events.runtime.leadership import Leadership
from nexus_events.transport.bus import Bus
from nexus_testing import eventually


def leadership(
    bus: Bus, bucket: str, lead: asyncio.Event | None = None
) -> tuple[Leadership, list[bool]]:
    """A leadership whose `lead` waits for `lead` (when given), and what it has led."""
    led: list[bool] = []

    async def on_lead() -> None:
        if lead is not None:
            await lead.wait()
        led.append(True)

    async def on_step_down() -> None:
        return None

    made = Leadership(
        bus.js,
        service="test",
        bucket=bucket,
        ttl=5,
        lead=on_lead,
        step_down=on_step_down,
        replicas=1,
    )
    return made, led


async def test_each_holder_s_term_is_greater_and_a_deposed_one_has_none(bus: Bus) -> None:
    bucket = f"lease_{uuid.uuid4().hex[:8]}"
    (first, _), (second, _) = leadership(bus, bucket), leadership(bus, bucket)
    await first.start()
    await second.start()
    assert (first.role, second.role) == ("leader", "standby")
    before = await first.term()
    assert before is not None
    assert await second.term() is None  # a standby has no token

    await first.stop()  # hands the key over: the standby takes it at once (the watch)
    await eventually(lambda: second.role == "leader", what="the standby leads")
    after = await second.term()
    assert after is not None
    assert after.epoch == before.epoch  # one bucket: the revisions compare
    assert after.revision > before.revision
    assert await first.term() is None
    await second.stop()


async def test_a_background_first_round_does_not_wait_for_lead(bus: Bus) -> None:
    bucket = f"lease_{uuid.uuid4().hex[:8]}"
    lead = asyncio.Event()
    slow, led = leadership(bus, bucket, lead)
    await asyncio.wait_for(slow.start(first_round="background"), 5)  # `lead` still blocked
    assert slow.campaigning
    await eventually(lambda: slow.leading, what="the takeover begins")
    assert led == []
    lead.set()
    await eventually(lambda: led == [True], what="lead returned")
    assert slow.role == "leader"
    await slow.stop()
    assert slow.campaign is None
    assert slow.role == "standby"
