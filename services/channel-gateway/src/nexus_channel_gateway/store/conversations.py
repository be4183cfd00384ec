"""Conversations (``conversations``): each chat thread that talks to one agent, folded from
the gateway's `conversation_turn|answered|ended` events (docs/channels.md, "Conversations").

Every fold is idempotent (a turn or answer is known by its run), so the router applying what
it just published and its consumer folding the same event later agree.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from nexus_events.events import (
    ChannelAddress,
    ConversationAnswered,
    ConversationEnded,
    ConversationMessage,
    ConversationTurn,
)

from nexus_channel_gateway.store.table_group import TableGroup


def conversation_id_for(address: ChannelAddress) -> str:
    """A thread's conversation: derived from where it is, so every replica and a rebuild agree."""
    key = f"{address.channel}\x00{address.conversation}\x00{address.thread or ''}"
    return "conv_" + hashlib.blake2b(key.encode(), digest_size=8).hexdigest()


@dataclass(frozen=True)
class Conversation:
    conversation_id: str
    address: ChannelAddress
    agent_id: str
    messages: list[dict[str, Any]]  # {role, text, run_id}, oldest first
    live_run: str | None
    last_activity: datetime
    ended: bool

    def history(self, most: int, max_chars: int, total: int) -> list[ConversationMessage]:
        """What the next run begins with: the newest messages, at most `most`, each cut to
        `max_chars`, `total` characters in all (the runner keeps them whole)."""
        kept: list[ConversationMessage] = []
        left = total
        for m in reversed(self.messages[-most:]):
            text = m["text"][:max_chars]
            if len(text) > left:
                break
            left -= len(text)
            kept.append(ConversationMessage(role=m["role"], text=text))
        return kept[::-1]


class ConversationRecords(TableGroup):
    async def conversation(self, conversation_id: str) -> Conversation | None:
        row = await self.pool.fetchrow(
            f"SELECT * FROM {self.s}.conversations WHERE conversation_id = $1", conversation_id
        )
        return None if row is None else _conversation(row)

    async def conversation_of_run(self, run_id: str) -> Conversation | None:
        row = await self.pool.fetchrow(
            f"SELECT * FROM {self.s}.conversations WHERE messages @> $1::jsonb LIMIT 1",
            json.dumps([{"run_id": run_id}]),
        )
        return None if row is None else _conversation(row)

    async def idle_conversations(self, before: datetime) -> list[Conversation]:
        """Live conversations with no run going and nothing said since `before`."""
        rows = await self.pool.fetch(
            f"SELECT * FROM {self.s}.conversations WHERE NOT ended AND live_run IS NULL"
            " AND last_activity < $1 ORDER BY last_activity",
            before,
        )
        return [_conversation(r) for r in rows]

    async def live_conversations(self) -> list[Conversation]:
        rows = await self.pool.fetch(
            f"SELECT * FROM {self.s}.conversations WHERE NOT ended ORDER BY last_activity"
        )
        return [_conversation(r) for r in rows]

    async def fold_turn(self, event: ConversationTurn, at: datetime) -> None:
        said = {"role": "user", "text": event.text, "run_id": event.run_id}
        async with self.pool.acquire() as conn, conn.transaction():
            row = await conn.fetchrow(
                f"SELECT messages, ended FROM {self.s}.conversations"
                " WHERE conversation_id = $1 FOR UPDATE",
                event.conversation_id,
            )
            if row is None:
                a = event.address
                await conn.execute(
                    f"INSERT INTO {self.s}.conversations (conversation_id, channel, conversation,"
                    " thread, agent_id, messages, live_run, last_activity, ended)"
                    " VALUES ($1, $2, $3, $4, $5, $6::jsonb, $7, $8, false)"
                    " ON CONFLICT DO NOTHING",
                    event.conversation_id, a.channel, a.conversation, a.thread or "",
                    event.agent_id, json.dumps([said]), event.run_id, at,
                )  # fmt: skip
                return
            messages = json.loads(row["messages"])
            if any(m.get("run_id") == event.run_id and m["role"] == "user" for m in messages):
                return  # folded already
            # An ended conversation starts afresh in the same thread.
            messages = [said] if row["ended"] else [*messages, said]
            await conn.execute(
                f"UPDATE {self.s}.conversations SET messages = $2::jsonb, live_run = $3,"
                " agent_id = $4, last_activity = $5, ended = false WHERE conversation_id = $1",
                event.conversation_id, json.dumps(messages), event.run_id, event.agent_id, at,
            )  # fmt: skip

    async def fold_answered(self, event: ConversationAnswered, at: datetime) -> None:
        said = {"role": "assistant", "text": event.text, "run_id": event.run_id}
        async with self.pool.acquire() as conn, conn.transaction():
            row = await conn.fetchrow(
                f"SELECT messages FROM {self.s}.conversations"
                " WHERE conversation_id = $1 FOR UPDATE",
                event.conversation_id,
            )
            if row is None:
                return
            messages = json.loads(row["messages"])
            if any(m.get("run_id") == event.run_id and m["role"] == "assistant" for m in messages):
                return
            await conn.execute(
                f"UPDATE {self.s}.conversations SET messages = $2::jsonb, last_activity = $3,"
                " live_run = CASE WHEN live_run = $4 THEN NULL ELSE live_run END"
                " WHERE conversation_id = $1",
                event.conversation_id, json.dumps([*messages, said]), at, event.run_id,
            )  # fmt: skip

    async def fold_ended(self, event: ConversationEnded) -> None:
        await self.pool.execute(
            f"UPDATE {self.s}.conversations SET ended = true, live_run = NULL"
            " WHERE conversation_id = $1",
            event.conversation_id,
        )


def _conversation(row: Any) -> Conversation:
    return Conversation(
        conversation_id=row["conversation_id"],
        address=ChannelAddress(
            channel=row["channel"],
            conversation=row["conversation"],
            thread=row["thread"] or None,
        ),
        agent_id=row["agent_id"],
        messages=json.loads(row["messages"]),
        live_run=row["live_run"],
        last_activity=row["last_activity"],
        ended=row["ended"],
    )
