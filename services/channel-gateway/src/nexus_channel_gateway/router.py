"""What to do with each verified chat message and each pairing event (one consumer, so the
allowlist is always as current as the stream position of the message being judged).

A message from a sender off the allowlist gets a pairing challenge; otherwise it is a run
request, a flow request (``flow <id>: <input>``), an approval answer (a run's approval or a
flow's gate), or words for the run whose thread it is in. Being paired is not
being an approver: an answer counts only if the approval's policy lets its sender decide from
where it was written (`nexus_events.contract.approver_policy`), else it is refused, told why,
audited.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

from nexus_events.contract import subjects
from nexus_events.contract.approver_policy import (
    DEFAULT_PRINCIPALS,
    Answer,
    ApproverPolicy,
    Teams,
    may_decide,
)
from nexus_events.contract.streams import CHANNELS
from nexus_events.events import (
    ApprovalDecision,
    ChannelAddress,
    ChannelMessageIn,
    ConversationAnswered,
    ConversationEnded,
    ConversationTurn,
    Event,
    FlowRequested,
    InboxMessage,
    Origin,
    PairingApproved,
    PairingRequested,
    PairingRevoked,
)
from nexus_events.transport.approvals import (
    ApprovalRecord,
    approval_record,
    claim_approval,
    held_claim,
    record_refusal,
)
from nexus_events.transport.bus import Bus, ConsumerSpec
from nexus_events.transport.fast import Delivered
from nexus_events.transport.run_requests import request_flow

from nexus_channel_gateway import commands
from nexus_channel_gateway.codes import short_code
from nexus_channel_gateway.conversations import Conversations
from nexus_channel_gateway.metrics import GatewayMetrics
from nexus_channel_gateway.replies import say
from nexus_channel_gateway.store import FlowRun, GatewayStore, RelayedApproval

log = logging.getLogger(__name__)

# Who asks, in the message id of the runs and flow runs a channel message requests.
SOURCE = "channel"
PAIRING_EVENTS = ("pairing_requested", "pairing_approved", "pairing_revoked")
CONVERSATION_EVENTS = ("conversation_turn", "conversation_answered", "conversation_ended")


def router_spec(durable: str, fetch_timeout: float, ack_wait: float = 30.0) -> ConsumerSpec:
    return ConsumerSpec(
        stream=CHANNELS,
        durable=durable,
        filter_subjects=(
            subjects.channel_events_filter(event="in"),
            *(subjects.channel_events_filter(event=e) for e in PAIRING_EVENTS),
            # Folded again in stream order: a message is judged against the conversation as
            # of its own position (its turn before it).
            *(subjects.channel_events_filter(event=e) for e in CONVERSATION_EVENTS),
        ),
        batch=50,
        fetch_timeout=fetch_timeout,
        ack_wait=ack_wait,
    )


def run_id_for(key: str) -> str:
    """The run a chat message starts: derived from its dedupe key, so a redelivered message
    asks for the same run (and core drops the repeat)."""
    return "run_" + hashlib.blake2b(key.encode(), digest_size=6).hexdigest()


def flow_run_id_for(key: str) -> str:
    """The flow run a chat message starts, derived from its dedupe key like `run_id_for`."""
    return "flow_" + hashlib.blake2b(key.encode(), digest_size=6).hexdigest()


class Router:
    def __init__(
        self,
        bus: Bus,
        store: GatewayStore,
        metrics: GatewayMetrics,
        conversations: Conversations,
        *,
        pairing_ttl: float,
        max_pending: int,
        open_channels: frozenset[str] = frozenset(),
        approver_chats: frozenset[tuple[str, str]] = frozenset(),
        default_approvers: Sequence[str] = DEFAULT_PRINCIPALS,
        teams: Teams | None = None,
    ) -> None:
        self.bus = bus
        self.approver_chats = approver_chats
        self.default_approvers = tuple(default_approvers)
        self.teams = dict(teams or {})  # NEXUS_TEAMS: who team:<name> is
        self.store = store
        self.metrics = metrics
        self.conversations = conversations
        self.pairing_ttl = pairing_ttl
        self.max_pending = max_pending
        self.open_channels = open_channels

    async def on_event(self, event: Event, delivered: Delivered) -> None:
        """FastStream handler of the router durable (`nexus_events.transport.fast`), subscribed with
        ``ordered=True``: a message is judged against the allowlist as of its own stream
        position, so a pairing approved before it must be applied before it (and a person's
        messages become run requests and replies in the order they were written)."""
        channel = delivered.address.ids["channel"]
        if isinstance(event, ChannelMessageIn):
            await self.message(channel, event, delivered.envelope.event_id)
        elif isinstance(event, PairingRequested):
            await self.store.pairing_requested(
                event.code,
                channel,
                event.user,
                event.conversation,
                event.expires_at,
                user_name=event.user_name,
            )
        elif isinstance(event, PairingApproved):
            await self.store.pairing_approved(
                channel, event.user, event.code, delivered.envelope.stream_seq
            )
        elif isinstance(event, PairingRevoked):
            await self.store.pairing_revoked(channel, event.user)
        elif isinstance(event, ConversationTurn | ConversationAnswered | ConversationEnded):
            await self.conversations.fold(event, delivered.envelope.timestamp or _now())

    async def message(self, channel: str, msg: ChannelMessageIn, event_id: str) -> None:
        key = msg.dedupe_key or event_id
        here = ChannelAddress(
            channel=channel, conversation=msg.conversation, thread=msg.thread or msg.message_id
        )
        if channel not in self.open_channels and not await self.store.allowed(channel, msg.user):
            await self._challenge(channel, msg, key, here)
            return
        command = commands.parse(msg.text)
        if isinstance(command, commands.RunCommand):
            await self._run(channel, msg, key, here, command)
        elif isinstance(command, commands.FlowCommand):
            await self._flow(channel, msg, here, key, command)
        elif isinstance(command, commands.ApprovalAnswer):
            await self._answer(channel, msg, key, here, command)
        elif isinstance(command, commands.Invalid):
            await say(self.bus, here, command.reason, key=f"reply:{key}", kind="notice")
        else:
            await self._to_run(channel, msg, key, here, command.text)

    async def _challenge(
        self, channel: str, msg: ChannelMessageIn, key: str, here: ChannelAddress
    ) -> None:
        self.metrics.inbound(channel, "unpaired")
        now = datetime.now(UTC)
        code = await self.store.pending_code(channel, msg.user, now)
        if code is None:
            if await self.store.pending_count(channel, now) >= self.max_pending:
                self.metrics.inbound(channel, "pairing_full")
                await say(
                    self.bus,
                    here,
                    "Too many pairing requests are pending; try again later.",
                    key=f"reply:{key}",
                    kind="pairing",
                )
                return
            code = short_code(key, salt="pairing")
            expires = now + timedelta(seconds=self.pairing_ttl)
            # Stored now (not only when the event comes back) so a burst of messages from
            # one sender gets one code; the event is what `nexus pair` and a rebuild read.
            await self.store.pairing_requested(
                code, channel, msg.user, msg.conversation, expires, user_name=msg.user_name
            )
            await self.bus.publish(
                subjects.channel_event(channel, "pairing_requested"),
                PairingRequested(
                    conversation=msg.conversation,
                    user=msg.user,
                    code=code,
                    expires_at=expires,
                    user_name=msg.user_name,
                ),
                msg_id=f"pairing:{channel}:{code}",
            )
        await say(
            self.bus,
            here,
            f"I don't know you yet. Ask an operator to run `nexus pair approve {code}`.",
            key=f"reply:{key}",
            kind="pairing",
        )

    async def _run(
        self,
        channel: str,
        msg: ChannelMessageIn,
        key: str,
        here: ChannelAddress,
        command: commands.RunCommand,
    ) -> None:
        # The thread's conversation starts (or goes on, with another agent) here.
        await self.conversations.start(
            here, agent_id=command.agent_id, text=command.input, run_id=run_id_for(key),
            user=msg.user,
        )  # fmt: skip

    async def _flow(
        self,
        channel: str,
        msg: ChannelMessageIn,
        here: ChannelAddress,
        key: str,
        command: commands.FlowCommand,
    ) -> None:
        flow_run_id = flow_run_id_for(key)
        request = FlowRequested(
            flow=command.flow,
            input=command.input,
            origin=Origin.CHANNEL,
            requested_by=f"{channel}:{msg.user}",
            reply_to=here,
            labels={"channel": channel},
        )
        await request_flow(self.bus, flow_run_id, request, source=SOURCE)

    async def _answer(
        self,
        channel: str,
        msg: ChannelMessageIn,
        key: str,
        here: ChannelAddress,
        answer: commands.ApprovalAnswer,
    ) -> None:
        relayed = await self.store.approval(answer.short_id)
        if relayed is None:
            self.metrics.approval(channel, "unknown")
            await say(
                self.bus,
                here,
                f"There is no approval {answer.short_id}.",
                key=f"reply:{key}",
                kind="notice",
            )
            return
        who = f"{channel}:{msg.user}"
        # Where it was written: the thread as the platform gave it (None: top level), and
        # the run that thread belongs to, if any (the requester counts only in their run's).
        written = ChannelAddress(channel=channel, conversation=msg.conversation, thread=msg.thread)
        in_run = None
        if msg.thread is not None:
            in_run = await self.store.run_in_thread(channel, msg.conversation, msg.thread)
        person = Answer(surface=channel, who=who, chat=written, in_run=in_run)
        if await self.store.gate_closed(relayed.run_id):
            # A flow gate decided, expired or ended with its flow: a claim now would publish
            # a decision nobody reads, and the person would think it counted.
            self.metrics.approval(channel, "gate_closed")
            held = await held_claim(self.bus.js, relayed.run_id, relayed.approval_id)
            told = f": {held.told()}" if held is not None else ""
            text = f"Gate {answer.short_id} no longer waits{told}."
            await say(self.bus, here, text, key=f"reply:{key}", kind="notice")
            return
        if not await self._may_decide(relayed, answer, person, key, here):
            return
        claim = await claim_approval(
            self.bus.js,
            relayed.run_id,
            relayed.approval_id,
            answer.decision,
            decided_by=who,
            surface=channel,
            token=key,  # a redelivery of this message after a crash finishes its own claim
        )
        if not claim.won:
            self.metrics.approval(channel, "already_decided")
            # Who decided and where, as the CLI and Plane tell their losers.
            text = f"Approval {answer.short_id} is already decided: {claim.told()}."
            await say(
                self.bus, here, text, key=f"reply:{key}", kind="notice", run_id=relayed.run_id
            )
            return
        await self.bus.publish(
            subjects.inbox(relayed.run_id),
            ApprovalDecision(
                approval_id=relayed.approval_id,
                decision=answer.decision,
                decided_by=who,
                surface=channel,
            ),
            msg_id=f"approval:{relayed.run_id}:{relayed.approval_id}",
        )
        self.metrics.approval(channel, "decided")
        verb = "Approved" if answer.decision == "approve" else "Denied"
        await say(
            self.bus,
            here,
            f"{verb} {answer.short_id}.",
            key=f"reply:{key}",
            kind="notice",
            run_id=relayed.run_id,
        )

    async def _may_decide(
        self,
        relayed: RelayedApproval,
        answer: commands.ApprovalAnswer,
        person: Answer,
        key: str,
        here: ChannelAddress,
    ) -> bool:
        """Check the answer against the approval's policy before anything is claimed; a
        refused answer is told why, recorded as `approval_refused`, and decides nothing."""
        gate = await self.store.gate(relayed.run_id)
        if gate is None:
            record = await approval_record(self.bus, relayed.run_id, relayed.approval_id)
            policy = record.policy(self.default_approvers, self.approver_chats, self.teams)
        else:  # a flow's gate: its pseudo-run has no request to read the policy from
            record = ApprovalRecord(run_id=relayed.run_id, approval_id=relayed.approval_id)
            policy = self._gate_policy(relayed.run_id, *gate)
        verdict = may_decide(policy, person)
        if verdict.allowed:
            return True
        self.metrics.approval(person.surface, "refused")
        await record_refusal(
            self.bus,
            record,
            answer.decision,
            person,
            verdict,
            key=key,
        )
        await say(
            self.bus,
            here,
            f"You may not decide approval {answer.short_id}: {verdict.reason}.",
            key=f"reply:{key}",
            kind="notice",
            run_id=relayed.run_id,
        )
        return False

    def _gate_policy(self, gate_run_id: str, flow: FlowRun, step: str) -> ApproverPolicy:
        """Who may decide a flow's gate: the gate's approvers, else the default; the flow's
        requester in the flow's thread."""
        named = flow.approvers.get(step)
        return ApproverPolicy(
            principals=tuple(named) if named else self.default_approvers,
            run_id=gate_run_id,
            requester=flow.requested_by,
            origin_surface=flow.origin_surface,
            origin=flow.origin,
            approver_chats=self.approver_chats,
            from_agent=bool(named),
            teams=self.teams,
        )

    async def _to_run(
        self, channel: str, msg: ChannelMessageIn, key: str, here: ChannelAddress, text: str
    ) -> None:
        run_id = None
        if msg.thread is not None and text:
            talk = await self.conversations.in_thread(channel, msg.conversation, msg.thread)
            if talk is not None and talk.live_run is None:
                # Its last run ended: the next one begins with the conversation so far.
                await self.conversations.start(
                    talk.address, agent_id=talk.agent_id, text=text, run_id=run_id_for(key),
                    user=msg.user,
                )  # fmt: skip
                return
            run_id = talk.live_run if talk is not None else None
            if run_id is None:
                run_id = await self.store.run_in_thread(channel, msg.conversation, msg.thread)
        if run_id is None or not text:
            await say(
                self.bus,
                here,
                "Say `run <agent>: <what to do>` or `flow <flow>: <what to do>`, answer"
                " `yes <id>` / `no <id>`, or reply in a run's thread to talk to it.",
                key=f"reply:{key}",
                kind="notice",
            )
            return
        await self.bus.publish(
            subjects.inbox(run_id),
            InboxMessage(
                text=text,
                sender=f"{channel}:{msg.user}",
                message_id=msg.message_id,
                channel=channel,
            ),
            msg_id=f"inbox:{key}",
        )


def _now() -> datetime:
    return datetime.now(UTC)
