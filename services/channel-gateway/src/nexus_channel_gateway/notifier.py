"""Progress of chat-started runs back to their thread: requested, started, resumed after a
runner loss (once per attempt), approval asked (relayed under a short id), approval decided,
and the ending with its reason. Approvals of
every run, chat-started or not, also go to the configured approver chats under the same id
(a budget ask's, on its pseudo-run with no origin, only there).

Every reply's idempotency key is derived from the run event (run, event, approval, and the
approver chat), so a redelivered run event publishes the same intent, which JetStream and the
sender drop.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from nexus_events.contract import subjects
from nexus_events.contract.runstate import TERMINAL_EVENTS, RunEvent, RunStatus
from nexus_events.contract.streams import RUNS
from nexus_events.events import (
    ApprovalDecided,
    ApprovalRelayed,
    ApprovalRequested,
    ChannelAddress,
    Event,
    RunCompleted,
    RunRequested,
    RunResuming,
    RunSleeping,
    TerminalEvent,
)
from nexus_events.transport.approvals import BUDGET_ASK_TOOL, decided_as
from nexus_events.transport.bus import Bus, ConsumerSpec
from nexus_events.transport.fast import Delivered

from nexus_channel_gateway.codes import short_code
from nexus_channel_gateway.conversations import Conversations
from nexus_channel_gateway.delegation import Delegator
from nexus_channel_gateway.replies import say
from nexus_channel_gateway.store import GatewayStore

log = logging.getLogger(__name__)

WATCHED: tuple[RunEvent, ...] = (
    RunEvent.REQUESTED,
    RunEvent.STARTED,
    RunEvent.RESUMING,
    RunEvent.APPROVAL_REQUESTED,
    RunEvent.APPROVAL_DECIDED,
    RunEvent.SLEEPING,
    *TERMINAL_EVENTS,
)
# How the chat line of an ending reads ("Run `r1` timed out: deadline_exceeded").
_ENDED_AS: dict[str, str] = {
    RunStatus.FAILED: "failed",
    RunStatus.TIMED_OUT: "timed out",
    RunStatus.LOST: "was lost",
    RunStatus.CANCELLED: "was cancelled",
}
# Longest result text posted; the rest is in `nexus attach`.
MAX_TEXT = 3000


def notifier_spec(durable: str, fetch_timeout: float, ack_wait: float = 30.0) -> ConsumerSpec:
    return ConsumerSpec(
        stream=RUNS,
        durable=durable,
        filter_subjects=tuple(subjects.run_events_filter(event=e) for e in WATCHED),
        batch=100,
        fetch_timeout=fetch_timeout,
        ack_wait=ack_wait,
    )


def _clip(text: str) -> str:
    return text if len(text) <= MAX_TEXT else text[: MAX_TEXT - 1] + "…"


def describe(run_id: str, name: str, event: Event) -> str | None:
    """The chat line for one run event (None: nothing to say)."""
    if name == RunEvent.STARTED:
        return f"▶️ Run `{run_id}` started."
    if isinstance(event, RunSleeping | RunResuming):
        return _between_attempts(run_id, event)
    if isinstance(event, RunCompleted):
        extra = "".join(f"\n{part}" for part in (event.result.summary, event.result.pr_url) if part)
        return _clip(f"✅ Run `{run_id}` completed.{extra}")
    if isinstance(event, TerminalEvent):
        verb = _ENDED_AS.get(event.status, event.status)
        detail = f" ({event.message})" if event.message else ""
        return _clip(f"❌ Run `{run_id}` {verb}: {event.reason}{detail}")
    return None


def _between_attempts(run_id: str, event: RunSleeping | RunResuming) -> str:
    if isinstance(event, RunSleeping):
        why = f" ({event.reason})" if event.reason else ""
        return _clip(f"💤 Run `{run_id}` sleeping until {event.until:%Y-%m-%d %H:%M} UTC{why}.")
    if event.wake is not None:
        return f"⏰ Run `{run_id}` woke ({event.wake.cause}): attempt {event.attempt}."
    detail = f" ({event.message})" if event.message else ""
    return _clip(
        f"🔁 Run `{run_id}` resumed after runner loss (attempt {event.attempt}):"
        f" {event.reason}{detail}"
    )


def child_outcome(run_id: str, agent: str, name: str, event: TerminalEvent) -> str:
    """What the delegating run reads in its inbox when its child ends."""
    if isinstance(event, RunCompleted):
        summary = event.result.summary or "(no summary)"
        return _clip(f"delegated run {run_id} ({agent}) completed: {summary}")
    detail = f" ({event.message})" if event.message else ""
    return _clip(f"delegated run {run_id} ({agent}) {name}: {event.reason}{detail}")


def _chat(address: ChannelAddress) -> str:
    return f"{address.channel}:{address.conversation}"


class Notifier:
    """`approvers`: chats every approval request is posted to (top level, not a thread)."""

    def __init__(
        self,
        bus: Bus,
        store: GatewayStore,
        delegator: Delegator | None = None,
        approvers: Sequence[ChannelAddress] = (),
        conversations: Conversations | None = None,
    ) -> None:
        self.bus = bus
        self.store = store
        self.conversations = conversations
        self.delegator = delegator
        self.approvers = tuple(
            ChannelAddress(channel=a.channel, conversation=a.conversation) for a in approvers
        )

    def _approvers_besides(self, origin: ChannelAddress | None) -> list[ChannelAddress]:
        """The approver chats, but not the origin's chat: there the thread already asks."""
        return [a for a in self.approvers if origin is None or _chat(a) != _chat(origin)]

    async def on_event(self, event: Event, delivered: Delivered) -> None:
        """FastStream handler of the notifier durable (`nexus_events.transport.fast`), subscribed
        with ``ordered=True``: the reply intents it publishes are posted in stream order by the
        sender, so a run's events must be turned into intents in their own order (requested,
        started, approval asked and decided, the ending) for the thread to read right."""
        run_id, name = delivered.address.run_id, delivered.address.event
        if run_id is None or name is None or run_id == subjects.NEW_RUN_TOKEN:
            return
        await self.notify(run_id, name, event)

    async def notify(self, run_id: str, name: str, event: Event) -> None:
        if isinstance(event, RunRequested):
            if event.reply_to is None:
                return
            await self.store.remember_origin(run_id, event.reply_to)
            await say(
                self.bus,
                event.reply_to,
                f"🆗 Run `{run_id}` of `{event.agent_id}` requested.",
                key=f"{run_id}:{RunEvent.REQUESTED}",
                kind=RunEvent.REQUESTED,
                run_id=run_id,
            )
            return
        if isinstance(event, TerminalEvent) and self.conversations is not None:
            await self.conversations.answered(run_id, event)
        if isinstance(event, TerminalEvent) and self.delegator is not None:
            held = await self.store.delegation(run_id)
            if held is not None:
                await self.delegator.ended(held, child_outcome(run_id, held.chain[-1], name, event))
        origin = await self.store.origin(run_id)
        if isinstance(event, ApprovalRequested):
            await self._relay(run_id, event, origin)
            return
        if isinstance(event, ApprovalDecided):
            await self._decided(run_id, event, origin)
            return
        if origin is None:
            return
        line = describe(run_id, name, event)
        if line is not None:
            # A run resumes (or sleeps) at most once per attempt: the attempt is in the key.
            key = f"{run_id}:{name}" + (
                f":{event.attempt}" if isinstance(event, RunResuming | RunSleeping) else ""
            )
            await say(self.bus, origin, line, key=key, kind=name, run_id=run_id)

    async def _decided(
        self, run_id: str, event: ApprovalDecided, origin: ChannelAddress | None
    ) -> None:
        relayed = await self.store.relayed(run_id, event.approval_id)
        short = f" {relayed.short_id}" if relayed is not None else ""
        if origin is not None:
            await say(
                self.bus,
                origin,
                f"Approval `{event.approval_id}`: "
                f"{decided_as(event.decision, event.decided_by, None)}.",
                key=f"{run_id}:decided:{event.approval_id}",
                kind="notice",
                run_id=run_id,
                approval_id=event.approval_id,
            )
        if relayed is None:
            return  # never asked here (no approvers then): nothing to close
        for chat in self._approvers_besides(origin):
            await say(
                self.bus,
                chat,
                f"Approval{short} of run `{run_id}`: "
                f"{decided_as(event.decision, event.decided_by, event.surface)}.",
                key=f"{run_id}:decided:{event.approval_id}:to:{_chat(chat)}",
                kind="notice",
                run_id=run_id,
                approval_id=event.approval_id,
            )

    async def _relay(
        self, run_id: str, event: ApprovalRequested, origin: ChannelAddress | None
    ) -> None:
        approvers = self._approvers_besides(origin)
        targets = ([] if origin is None else [origin]) + approvers
        if not targets:
            return
        wanted = short_code(f"{run_id}.{event.approval_id}", length=5, salt="approval")
        short = await self.store.relay_approval(wanted, run_id, event.approval_id, targets[0])
        # A budget ask's pseudo-run is no run of anyone's: say what it asks for.
        head = (
            f"🔐 Budget ask `{run_id}`: {event.summary}"
            if event.tool == BUDGET_ASK_TOOL
            else f"🔐 Run `{run_id}` asks to use `{event.tool}`: {event.summary}"
        )
        text = _clip(
            head
            + (f"\nWhy: {event.why}" if event.why else "")
            + f"\nAnswer `yes {short}` or `no {short}` (expires {event.expires_at:%H:%M} UTC)."
        )
        for target in targets:
            # The origin keeps its keys of before approvers existed (no repeat after upgrade).
            suffix = "" if target is origin else f":to:{_chat(target)}"
            await self.bus.publish(
                subjects.channel_event(target.channel, "approval_relayed"),
                ApprovalRelayed(
                    run_id=run_id,
                    approval_id=event.approval_id,
                    short_id=short,
                    conversation=target.conversation,
                    thread=target.thread,
                ),
                msg_id=f"relay:{run_id}:{event.approval_id}{suffix}",
            )
            await say(
                self.bus,
                target,
                text,
                key=f"{run_id}:approval:{event.approval_id}{suffix}",
                kind="approval",
                run_id=run_id,
                approval_id=event.approval_id,
            )
