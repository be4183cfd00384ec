"""Publishing a reply intent (`ChannelMessageOut`) on ``nexus.channel.v1.<channel>.out``:
the idempotency key is also the Nats-Msg-Id, so the intent is stored once however often the
event that caused it is redelivered; the sender posts it once."""

from __future__ import annotations

from nexus_events.contract import subjects
from nexus_events.contract.subjects import Direction
from nexus_events.events import ChannelAddress, ChannelMessageOut
from nexus_events.transport.bus import Bus


async def say(
    bus: Bus,
    address: ChannelAddress,
    text: str,
    *,
    key: str,
    kind: str,
    run_id: str | None = None,
    approval_id: str | None = None,
) -> None:
    intent = ChannelMessageOut(
        conversation=address.conversation,
        text=text,
        run_id=run_id,
        approval_id=approval_id,
        idempotency_key=key,
        thread=address.thread,
        kind=kind,
    )
    await bus.publish(
        subjects.channel_message(address.channel, Direction.OUT), intent, msg_id=f"out:{key}"
    )
