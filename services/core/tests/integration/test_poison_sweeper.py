"""Poison on streams whose own readers may be absent (issue 29, defect 2): NEXUS_INBOX for a run
that is not live, NEXUS_CHANNELS with no gateway. Core's sweeper dead-letters what does not
decode, leaves valid messages alone, and keeps nothing unread."""

from __future__ import annotations

from nexus_events.contract import subjects
from nexus_events.contract.streams import CHANNELS, INBOX
from nexus_events.events import ApprovalDecision, ChannelMessageIn, InboxMessage, RouteRequest
from nexus_events.transport.bus import Bus
from nexus_testing import dead_letters, eventually

from nexus_core.app import CoreApp


async def _settled(bus: Bus, stream: str, durable: str) -> bool:
    info = await bus.js.consumer_info(stream, durable)
    return (info.num_pending or 0) == 0 and (info.num_ack_pending or 0) == 0


async def test_poison_nobody_else_reads_is_dead_lettered_and_valid_messages_are_not(
    bus: Bus, core: CoreApp
) -> None:
    poison = {
        # A run that is not live: no runner reads its inbox.
        (subjects.inbox("run_gone"), b"{not json"): "undecodable",
        (subjects.inbox("run_gone"), b'{"text": 5}'): "invalid_event",
        # Delegation requests and chat messages with no gateway deployed.
        (subjects.route("reviewer"), b'{"input": "no correlation id"}'): "invalid_event",
        (subjects.channel_event("slack", "in"), b'{"conversation": "C1"}'): "invalid_event",
        (subjects.channel_event("slack", "bogus"), b"{}"): "unknown_event",
    }
    seqs = {}
    for (subject, body), reason in poison.items():
        ack = await bus.js.publish(subject, body)
        seqs[(ack.stream, ack.seq)] = reason
    valid = [
        await bus.publish(subjects.inbox("run_gone"), InboxMessage(text="hello")),
        await bus.publish(
            subjects.inbox("run_gone"), ApprovalDecision(approval_id="a1", decision="approve")
        ),
        await bus.publish(
            subjects.route("reviewer"), RouteRequest(correlation_id="c-1", input="review")
        ),
        await bus.publish(
            subjects.channel_event("slack", "in"),
            ChannelMessageIn(conversation="C1", text="hi", user="U1", message_id="m1"),
        ),
    ]

    async def swept() -> dict[tuple[str, int], str]:
        letters = await dead_letters(bus)
        return {(x.stream, x.stream_seq): x.reason for x in letters}

    found = await eventually(swept, lambda f: set(seqs) <= set(f), what="every poison swept")
    assert {k: v for k, v in found.items() if k in seqs} == seqs
    assert not {(a.stream, a.seq) for a in valid} & set(found)  # nothing valid is a letter
    letters = [x for x in await dead_letters(bus) if (x.stream, x.stream_seq) in seqs]
    assert {x.consumer for x in letters} == {"core_sweep_inbox", "core_sweep_channels"}
    assert len(letters) == len(seqs)  # once each
    for stream, durable in ((INBOX, "core_sweep_inbox"), (CHANNELS, "core_sweep_channels")):
        await eventually(lambda s=stream, d=durable: _settled(bus, s, d), what=f"{durable} idle")
