"""Progress of chat-started flow runs back to their thread, from NEXUS_FLOWS: requested, each
step started and finished (its agent, its verdict or status), a gate waiting (relayed under a
short id, answered with ``yes <id>`` / ``no <id>`` like a run's approval), the gate's
decision, an escalation, and the end.

It also remembers what an answer to a gate is judged by (`router`): the flow run's thread and
requester (``requested``), its gates' approvers (``accepted``: `GateStep.approvers`) and which
flow each gate's pseudo-run belongs to (``waiting``). Every reply's idempotency key is derived
from the flow event (flow run, event, step, round, item), so a redelivered or re-published
event posts nothing twice.
"""

from __future__ import annotations

from typing import Any

from nexus_events.contract import subjects
from nexus_events.contract.streams import FLOWS
from nexus_events.events import (
    ApprovalRelayed,
    ChannelAddress,
    Event,
    FlowAccepted,
    FlowCancelled,
    FlowCompleted,
    FlowEscalated,
    FlowFailed,
    FlowRequested,
    FlowResumed,
    FlowStepFinished,
    FlowStepStarted,
    FlowWaiting,
    GateStep,
)
from nexus_events.events.flows import StepStatus
from nexus_events.transport.bus import Bus, ConsumerSpec
from nexus_events.transport.fast import Delivered

from nexus_channel_gateway.codes import short_code
from nexus_channel_gateway.replies import say
from nexus_channel_gateway.store import GatewayStore

# Longest summary quoted in a line; the rest is in `nexus flow get`.
MAX_TEXT = 1500
_StepEvent = FlowStepStarted | FlowStepFinished | FlowWaiting | FlowResumed | FlowEscalated


def flow_notifier_spec(durable: str, fetch_timeout: float, ack_wait: float = 30.0) -> ConsumerSpec:
    return ConsumerSpec(
        stream=FLOWS,
        durable=durable,
        filter_subjects=(subjects.flow_events_filter(),),
        batch=100,
        fetch_timeout=fetch_timeout,
        ack_wait=ack_wait,
    )


def _clip(text: str) -> str:
    return text if len(text) <= MAX_TEXT else text[: MAX_TEXT - 1] + "…"


def _where(event: _StepEvent) -> str:
    extra = "" if event.round == 1 else f", round {event.round}"
    extra += "" if event.item is None else f", item {event.item}"
    return f"`{event.step}`{extra}"


def step_key(flow_run_id: str, name: str, event: _StepEvent) -> str:
    item = "" if event.item is None else f":i{event.item}"
    return f"flow:{flow_run_id}:{name}:{event.step}:r{event.round}{item}"


def _verdict(output: dict[str, Any]) -> str | None:
    for key in ("verdict", "decision"):
        value = output.get(key)
        if isinstance(value, str | bool | int) and value != "":
            return str(value)
    return None


def describe(flow: str, name: str, event: Event) -> str | None:  # noqa: PLR0911 - one per event
    """The chat line of one flow event other than a gate (None: nothing to say)."""
    if isinstance(event, FlowStepStarted):
        agent = f" ({event.agent_id})" if event.agent_id else ""
        return f"▶️ Flow `{flow}`: step {_where(event)}{agent} started."
    if isinstance(event, FlowStepFinished):
        said = _verdict(event.output)
        mark = "✅" if event.status == StepStatus.SUCCEEDED else "❌"
        outcome = f"verdict `{said}`" if said else event.status
        if event.status != StepStatus.SUCCEEDED:
            outcome += f": {event.reason}"
        summary = f"\n{event.summary}" if event.summary else ""
        return _clip(f"{mark} Flow `{flow}`: step {_where(event)} finished, {outcome}.{summary}")
    if isinstance(event, FlowWaiting):  # a timer or an event (gates are relayed)
        return f"⏸ Flow `{flow}`: step {_where(event)} waits for the {event.kind}."
    if isinstance(event, FlowResumed):
        if event.by not in ("approved", "denied", "expired"):
            return None
        who = f" by {event.decided_by}" if event.decided_by else ""
        return f"🔓 Flow `{flow}`: gate `{event.step}` {event.by}{who}."
    if isinstance(event, FlowEscalated):
        to = f" to gate `{event.to}`" if event.to else ""
        return f"⚠️ Flow `{flow}`: step `{event.step}` escalated{to} ({event.reason})."
    if isinstance(event, FlowCompleted):
        return f"🏁 Flow `{flow}` completed."
    if isinstance(event, FlowFailed | FlowCancelled):
        verb = "failed" if isinstance(event, FlowFailed) else "was cancelled"
        detail = f" ({event.message})" if event.message else ""
        return _clip(f"❌ Flow `{flow}` {verb}: {event.reason}{detail}")
    return None


class FlowNotifier:
    def __init__(self, bus: Bus, store: GatewayStore) -> None:
        self.bus = bus
        self.store = store

    async def on_event(self, event: Event, delivered: Delivered) -> None:
        """FastStream handler of the flow notifier durable (`nexus_events.transport.fast`),
        subscribed with ``ordered=True``: a flow's lines reach its thread in the flow's own
        order."""
        flow_run_id = delivered.address.ids.get("flow_run_id")
        name = delivered.address.event
        if flow_run_id is None or name is None or flow_run_id == subjects.NEW_RUN_TOKEN:
            return
        await self.notify(flow_run_id, name, event)

    async def notify(self, flow_run_id: str, name: str, event: Event) -> None:
        if isinstance(event, FlowRequested):
            await self.store.flow_requested(
                flow_run_id, event.flow, event.reply_to, event.requested_by, str(event.origin)
            )
            if event.reply_to is not None:
                await say(
                    self.bus,
                    event.reply_to,
                    f"🆗 Flow `{event.flow}` requested (`{flow_run_id}`).",
                    key=f"flow:{flow_run_id}:requested",
                    kind="flow_requested",
                )
            return
        if isinstance(event, FlowAccepted):
            approvers = {
                s.id: list(s.approvers)
                for s in event.definition.steps
                if isinstance(s, GateStep) and s.approvers
            }
            await self.store.flow_accepted(flow_run_id, event.flow, approvers)
            return
        if isinstance(event, FlowResumed | FlowStepFinished):
            await self.store.close_gates(flow_run_id, event.step)
        elif isinstance(event, FlowCompleted | FlowFailed | FlowCancelled):
            await self.store.close_gates(flow_run_id)
        gate = isinstance(event, FlowWaiting) and event.kind == "gate"
        if isinstance(event, FlowWaiting) and gate and event.gate_run_id and event.approval_id:
            await self.store.gate_opened(event.gate_run_id, flow_run_id, event.step)
        flow = await self.store.flow(flow_run_id)
        if flow is None or flow.origin is None:
            return  # not asked from chat (a gate still reaches the approver chats: `notifier`)
        label = flow.flow or "flow"
        if isinstance(event, FlowWaiting) and gate:
            await self._gate(flow_run_id, label, name, event, flow.origin)
            return
        line = describe(label, name, event)
        if line is None:
            return
        key = f"flow:{flow_run_id}:{name}"
        if isinstance(event, _StepEvent):
            key = step_key(flow_run_id, name, event)
        await say(self.bus, flow.origin, line, key=key, kind=f"flow_{name}")

    async def _gate(
        self, flow_run_id: str, flow: str, name: str, event: FlowWaiting, origin: ChannelAddress
    ) -> None:
        """Relay the gate under a short id (the same one the approver chats get for the gate's
        ``approval_requested``: derived alike), and ask in the flow's thread."""
        if not event.gate_run_id or not event.approval_id:
            return
        run_id, approval_id = event.gate_run_id, event.approval_id
        wanted = short_code(f"{run_id}.{approval_id}", length=5, salt="approval")
        short = await self.store.relay_approval(wanted, run_id, approval_id, origin)
        await self.bus.publish(
            subjects.channel_event(origin.channel, "approval_relayed"),
            ApprovalRelayed(
                run_id=run_id,
                approval_id=approval_id,
                short_id=short,
                conversation=origin.conversation,
                thread=origin.thread,
            ),
            msg_id=f"relay:{run_id}:{approval_id}",
        )
        until = f" (expires {event.until:%H:%M} UTC)" if event.until else ""
        text = _clip(
            f"✋ Flow `{flow}` waits at gate `{event.step}`: {event.summary}"
            f"\nAnswer `yes {short}` or `no {short}`{until}."
        )
        await say(
            self.bus,
            origin,
            text,
            key=step_key(flow_run_id, name, event),
            kind="approval",
            approval_id=approval_id,
        )
