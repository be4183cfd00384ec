"""Chat conversations (docs/channels.md, "Conversations"): a thread talks to one agent, and
each message in it that comes when no run of it is going starts a run of that agent whose
transcript begins with the conversation so far.

What happens is recorded as events on NEXUS_CHANNELS (`conversation_turn` when a message
starts a run, `conversation_answered` when that run ends, `conversation_ended` when the
conversation was idle too long), each with an id derived from what caused it, and folded into
`channels.conversations`: by whoever published it at once, and by the router's consumer again
(idempotent), so a gateway killed at any point, or a rebuild, ends with the same rows.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

from nexus_events.contract import subjects
from nexus_events.events import (
    ChannelAddress,
    ConversationAnswered,
    ConversationEnded,
    ConversationTurn,
    Origin,
    RunCompleted,
    RunRequested,
    TerminalEvent,
)
from nexus_events.runtime.clock import Clock, SystemClock
from nexus_events.transport.bus import Bus
from nexus_events.transport.run_requests import request_run

from nexus_channel_gateway.replies import say
from nexus_channel_gateway.store import Conversation, GatewayStore, conversation_id_for

log = logging.getLogger(__name__)

SOURCE = "channel"
# The longest answer kept in a conversation (the run's summary; the rest is in its events).
MAX_ANSWER = 4000
ABANDONED = "[abandoned]"


class Conversations:
    """`history`: the most messages a new run begins with, each cut to `history_chars`,
    `history_total` characters in all, the newest kept: the runner keeps them whole (it
    condenses the run's own work), so they must stay small beside a model's context."""

    def __init__(
        self,
        bus: Bus,
        store: GatewayStore,
        *,
        idle_seconds: float,
        history: int = 40,
        history_chars: int = 4000,
        history_total: int = 24_000,
        clock: Clock | None = None,
    ) -> None:
        self.bus = bus
        self.store = store
        self.idle_seconds = idle_seconds
        self.history = history
        self.history_chars = history_chars
        self.history_total = history_total
        self.clock: Clock = clock or SystemClock()

    async def in_thread(self, channel: str, chat: str, thread: str) -> Conversation | None:
        """The conversation a message in `thread` belongs to: the thread's own, or (a Telegram
        reply to one of the bot's posts) the one whose run that post was about."""
        address = ChannelAddress(channel=channel, conversation=chat, thread=thread)
        found = await self.store.conversation(conversation_id_for(address))
        if found is not None:
            return found
        run_id = await self.store.run_in_thread(channel, chat, thread)
        return None if run_id is None else await self.store.conversation_of_run(run_id)

    async def start(
        self,
        address: ChannelAddress,
        *,
        agent_id: str,
        text: str,
        run_id: str,
        user: str,
    ) -> None:
        """Start `run_id` of `agent_id` on `text`, beginning with the conversation so far (none
        when the thread has none, or its conversation ended), and record the turn."""
        conversation_id = conversation_id_for(address)
        known = await self.store.conversation(conversation_id)
        history = (
            []
            if known is None or known.ended
            else known.history(self.history, self.history_chars, self.history_total)
        )
        await self.store.remember_origin(run_id, address)
        request = RunRequested(
            agent_id=agent_id,
            input=text,
            origin=Origin.CHANNEL,
            requested_by=f"{address.channel}:{user}",
            reply_to=address,
            labels={"channel": address.channel, "conversation": conversation_id},
            conversation=history or None,
        )
        await request_run(self.bus, run_id, request, source=SOURCE)
        turn = ConversationTurn(
            conversation_id=conversation_id,
            address=address,
            agent_id=agent_id,
            run_id=run_id,
            text=text,
            user=user,
        )
        await self.bus.publish(
            subjects.channel_event(address.channel, turn.event_name),
            turn,
            msg_id=f"conversation:{run_id}:turn",
        )
        await self.store.fold_turn(turn, self.clock.now())

    async def answered(self, run_id: str, event: TerminalEvent) -> None:
        """A run ended: if it was a conversation's, record what it answered."""
        conversation = await self.store.conversation_of_run(run_id)
        if conversation is None:
            return
        if isinstance(event, RunCompleted):
            text = event.result.summary or "(no summary)"
        else:
            detail = f" ({event.message})" if event.message else ""
            text = f"(the run ended {event.status}: {event.reason}{detail})"
        answer = ConversationAnswered(
            conversation_id=conversation.conversation_id, run_id=run_id, text=text[:MAX_ANSWER]
        )
        await self.bus.publish(
            subjects.channel_event(conversation.address.channel, answer.event_name),
            answer,
            msg_id=f"conversation:{run_id}:answered",
        )
        await self.store.fold_answered(answer, self.clock.now())

    async def fold(
        self, event: ConversationTurn | ConversationAnswered | ConversationEnded, at: datetime
    ) -> None:
        """The router's consumer folding the stream (what was applied at once, again)."""
        if isinstance(event, ConversationTurn):
            await self.store.fold_turn(event, at)
        elif isinstance(event, ConversationAnswered):
            await self.store.fold_answered(event, at)
        else:
            await self.store.fold_ended(event)

    async def sweep(self) -> int:
        """End the conversations idle past `idle_seconds` (no run going), each told once."""
        now = self.clock.now()
        ended = 0
        for c in await self.store.idle_conversations(now - timedelta(seconds=self.idle_seconds)):
            idle = (now - c.last_activity).total_seconds()
            said = len(c.messages)  # what makes this ending this one (a later one differs)
            await say(
                self.bus,
                c.address,
                f"{ABANDONED} This conversation with `{c.agent_id}` ended after"
                f" {_span(idle)} without a message; write again to start a new one.",
                key=f"conversation:{c.conversation_id}:{said}:abandoned",
                kind="notice",
            )
            end = ConversationEnded(
                conversation_id=c.conversation_id, reason="abandoned", idle_seconds=idle
            )
            await self.bus.publish(
                subjects.channel_event(c.address.channel, end.event_name),
                end,
                msg_id=f"conversation:{c.conversation_id}:{said}:ended",
            )
            await self.store.fold_ended(end)
            ended += 1
        return ended

    async def tell_shutdown(self) -> None:
        """A planned stop: each live conversation is told once (a second stop with nothing
        said since has the same key, and the sender posts a key once)."""
        for c in await self.store.live_conversations():
            await say(
                self.bus,
                c.address,
                "[shutting down] The gateway is restarting; this conversation goes on when you"
                " write again.",
                key=f"conversation:{c.conversation_id}:{len(c.messages)}:shutdown",
                kind="notice",
            )


def _span(seconds: float) -> str:
    if seconds >= 86_400:
        return f"{seconds / 86_400:.0f} d"
    if seconds >= 3600:
        return f"{seconds / 3600:.0f} h"
    if seconds >= 60:
        return f"{seconds / 60:.0f} min"
    return f"{seconds:.0f} s"


__all__ = ["ABANDONED", "Conversations"]
