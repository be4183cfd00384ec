"""The poison sweeper: one durable reader on each stream whose own readers may be absent, so a
message nobody else would decode is still dead-lettered instead of stored unread.

NEXUS_INBOX is read per run (``agent.inbox.v1.<run>``) by that run's runner only while the run
is live, and its ``agent.route.v1.<agent>`` subjects and NEXUS_CHANNELS by the channel gateway
only where one is deployed: an invalid ``nats pub`` there was kept for days and never reported.
Core is always deployed, so it keeps one durable consumer per swept stream. The bus `Consumer`
already dead-letters every message that does not decode (the codec's reason: undecodable,
invalid_event, unknown_event; consumer ``<prefix>_sweep_<stream>``); the handler accepts the
rest without acting on them: the sweeper validates, it never does the readers' work.

A message that is poison for its own reader too (a live runner, the gateway) is still filed
once: a dead letter's message id is the original's stream position alone
(`nexus_events.transport.dead_letters.dead_letter_id`), so the first reader's letter is the one
kept.
"""

from __future__ import annotations

from nexus_events.contract.streams import CHANNELS, INBOX
from nexus_events.transport.bus import ConsumerSpec, Delivery

# Streams whose readers are not always there (see the module docstring).
SWEPT_STREAMS = (INBOX, CHANNELS)


def sweeper_specs(prefix: str, fetch_timeout: float) -> list[ConsumerSpec]:
    """One durable per swept stream: ``<prefix>_sweep_inbox``, ``<prefix>_sweep_channels``."""
    return [
        ConsumerSpec(
            stream=stream,
            durable=f"{prefix}_sweep_{stream.removeprefix('NEXUS_').lower()}",
            batch=200,
            fetch_timeout=fetch_timeout,
        )
        for stream in SWEPT_STREAMS
    ]


async def accept(batch: list[Delivery]) -> None:
    """Valid messages need nothing from the sweeper: returning acks them."""


__all__ = ["SWEPT_STREAMS", "accept", "sweeper_specs"]
