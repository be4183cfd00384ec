"""Sends each reply intent (`ChannelMessageOut`) once and records the outcome
(`ChannelMessageSent`, same idempotency key).

Once per key: a row in ``channels.sends`` says 'sending' before the platform call and 'sent'
after it. A redelivery finds 'sent' and does nothing; a 429 clears the row (nothing was
posted) and redelivers after the platform's Retry-After. A redelivery that finds 'sending'
means the gateway died (or the network failed) during the call: Slack is asked whether the
message is there (each post carries its key in the message metadata) and it is posted only
if not. The Telegram Bot API cannot read a chat back, so there the outcome is recorded as
`unknown` and not posted again (at most once, counted).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping

from nexus_events.contract import subjects
from nexus_events.contract.codec import Decoded
from nexus_events.contract.streams import CHANNELS
from nexus_events.events import ChannelMessageOut, ChannelMessageSent, Event
from nexus_events.transport.bus import Bus, ConsumerSpec
from nexus_events.transport.fast import Delivered, Retry

from nexus_channel_gateway.metrics import GatewayMetrics
from nexus_channel_gateway.platforms import Poster, RateLimited, Rejected
from nexus_channel_gateway.store import GatewayStore

log = logging.getLogger(__name__)

# A 429 storm must not exhaust deliveries: each is a wait, not a failure.
MAX_DELIVER = 50
# Slack allows ~1 message per second per channel: keep a batch small, in order.
BATCH = 20
# A Retry-After up to this many seconds (in all, per delivery) is waited out in the handler:
# the sender handles one intent at a time, so nothing posts before it and a thread keeps its
# order. A longer one is a redelivery after it (the ack is not held that long; later intents
# may then go first).
HOLD_MAX = 10.0


def sender_spec(durable: str, fetch_timeout: float, ack_wait: float = 30.0) -> ConsumerSpec:
    return ConsumerSpec(
        stream=CHANNELS,
        durable=durable,
        filter_subjects=(subjects.channel_events_filter(event="out"),),
        batch=BATCH,
        max_deliver=MAX_DELIVER,
        backoff=(1.0, 5.0, 30.0),
        fetch_timeout=fetch_timeout,
        ack_wait=ack_wait,
    )


class Sender:
    def __init__(
        self,
        bus: Bus,
        store: GatewayStore,
        metrics: GatewayMetrics,
        posters: Mapping[str, Poster],
    ) -> None:
        self.bus = bus
        self.store = store
        self.metrics = metrics
        self.posters = posters

    async def on_intent(self, event: Event, delivered: Delivered) -> None:
        """FastStream handler of the sender durable (`nexus_events.transport.fast`), subscribed with
        ``ordered=True``: intents are posted one at a time in stream order, so a run's
        progress reads in order in its thread (requested, started, the ending); a rate limit
        holds the line (`HOLD_MAX`) rather than letting later intents overtake."""
        if not isinstance(event, ChannelMessageOut):
            return
        channel = delivered.address.ids["channel"]
        held = 0.0
        while (delay := await self.send(channel, event, delivered)) is not None:
            if held + delay > HOLD_MAX:
                raise Retry(delay, f"{channel} rate limit: retry after {delay}s")
            held += delay
            await asyncio.sleep(delay)

    async def send(self, channel: str, intent: ChannelMessageOut, d: Decoded) -> float | None:
        """Post one intent; returns a delay if the platform asks to wait."""
        key = intent.idempotency_key or d.envelope.event_id
        state = await self.store.send_state(key)
        if state is not None and state[0] != "sending":
            # Already done; the outcome event may not be (a crash right after the post), so
            # publish it again: its Nats-Msg-Id makes the repeat a no-op when it is there.
            self.metrics.send(channel, "skipped")
            await self._outcome(
                channel,
                intent,
                key,
                status=state[0],
                platform_id=state[1],
                error=None,
                d=d,
                count=False,
            )
            return None
        poster = self.posters.get(channel)
        if poster is None:
            await self._failed(channel, intent, key, "channel cannot send", d)
            return None
        if state is not None:
            handled, delay = await self._recover(channel, intent, key, poster, d)
            if handled:
                return delay
        return await self._post(channel, intent, key, poster, d)

    async def _recover(
        self, channel: str, intent: ChannelMessageOut, key: str, poster: Poster, d: Decoded
    ) -> tuple[bool, float | None]:
        """Interrupted during the platform call: ask the platform whether it posted.
        Returns (handled, delay); not handled means: post now."""
        if not poster.can_find:  # whether it went out is unknowable: never post twice
            log.warning("send %s was interrupted mid-call: recorded unknown, not re-posted", key)
            await self.store.mark_sent(key, None, "unknown")
            await self._outcome(
                channel, intent, key, status="unknown", platform_id=None, error=None, d=d
            )
            return True, None
        try:
            found = await poster.find(intent.conversation, intent.thread, key)
        except RateLimited as exc:
            return True, exc.retry_after
        if found is None:
            return False, None
        await self._posted(channel, intent, key, found, d)
        return True, None

    async def _post(
        self, channel: str, intent: ChannelMessageOut, key: str, poster: Poster, d: Decoded
    ) -> float | None:
        await self.store.mark_sending(key)
        try:
            platform_id = await poster.post(intent.conversation, intent.thread, intent.text, key)
        except RateLimited as exc:
            await self.store.clear_sending(key)
            self.metrics.send(channel, "rate_limited")
            return exc.retry_after
        except Rejected as exc:
            await self._failed(channel, intent, key, str(exc), d)
            return None
        except Exception:
            # The network: where the platform can be asked, the row stays 'sending' and the
            # retry asks first whether the post went through; elsewhere, retry the post.
            if not poster.can_find:
                await self.store.clear_sending(key)
            raise
        await self._posted(channel, intent, key, platform_id, d)
        return None

    async def _failed(
        self, channel: str, intent: ChannelMessageOut, key: str, error: str, d: Decoded
    ) -> None:
        await self.store.mark_sent(key, None, "failed")
        await self._outcome(
            channel, intent, key, status="failed", platform_id=None, error=error, d=d
        )

    async def _posted(
        self, channel: str, intent: ChannelMessageOut, key: str, platform_id: str, d: Decoded
    ) -> None:
        await self.store.mark_sent(key, platform_id)
        if intent.run_id is not None:
            await self.store.remember_post(channel, intent.conversation, platform_id, intent.run_id)
        await self._outcome(
            channel, intent, key, status="sent", platform_id=platform_id, error=None, d=d
        )

    async def _outcome(
        self,
        channel: str,
        intent: ChannelMessageOut,
        key: str,
        *,
        status: str,
        platform_id: str | None,
        error: str | None,
        d: Decoded,
        count: bool = True,
    ) -> None:
        if count:
            self.metrics.send(channel, status)
        await self.bus.publish(
            subjects.channel_event(channel, "sent"),
            ChannelMessageSent(
                idempotency_key=key,
                conversation=intent.conversation,
                status=status,
                platform_message_id=platform_id,
                error=error,
                attempts=d.envelope.num_delivered,
                run_id=intent.run_id,
            ),
            msg_id=f"sent:{key}",
        )
